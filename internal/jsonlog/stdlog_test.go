package jsonlog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestStdLoggerWritesJSON: what net/http reports through ErrorLog becomes JSON lines of the
// proxy's log, a client's failed TLS handshake at debug and anything else at warn.
func TestStdLoggerWritesJSON(t *testing.T) {
	var buf bytes.Buffer
	l := StdLogger(zerolog.New(&buf).Level(zerolog.DebugLevel), "admin HTTP server")
	l.Printf("http: TLS handshake error from 127.0.0.1:5: remote error: tls: bad certificate")
	l.Printf("http: panic serving 127.0.0.1:6: boom")
	if errs := Check(buf.Bytes(), 10); len(errs) > 0 {
		t.Fatalf("not the log's rules: %v\n%s", errs, buf.String())
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"level":"debug"`) || !strings.Contains(lines[1], `"level":"warn"`) ||
		!strings.Contains(lines[0], `bad certificate`) {
		t.Fatalf("lines:\n%s", buf.String())
	}
}
