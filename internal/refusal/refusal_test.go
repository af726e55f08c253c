package refusal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lines collects log lines from the timers' goroutines.
type lines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// all are the lines so far, each checked by jsonlog and decoded.
func (l *lines) all(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		if err := jsonlog.CheckLine([]byte(line)); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		out = append(out, m)
	}
	return out
}

// A flood is two lines: the first refusal at once, then one summary of the rest with their
// details, largest first.
func TestFloodIsSummarised(t *testing.T) {
	log := &lines{}
	s := New(zerolog.New(log), 200*time.Millisecond)
	for i := range 1234 {
		detail := "bad_signature"
		if i%12 == 5 {
			detail = "expired"
		}
		s.Refused(AuthFailed, detail, "10.0.0.1:1234", "authentication failed (token): "+detail)
	}
	got := log.all(t)
	if len(got) != 1 || got[0]["message"] != "refused a client: authentication_failed (bad_signature)" ||
		got[0]["remote"] != "10.0.0.1:1234" || got[0]["level"] != "warn" || got[0]["detail"] != "bad_signature" {
		t.Fatalf("want one line for the first refusal; got %d, the first: %v", len(got), got[0])
	}
	wait.Until(t, 5*time.Second, "the summary line", func() bool { return len(log.all(t)) == 2 })
	sum := log.all(t)[1]
	want := "refused 1,233 clients in the last 200ms: authentication_failed (bad_signature 1,130, expired 103)"
	if msg := sum["message"].(string); !strings.HasPrefix(msg, "refused 1,233 clients in the last ") ||
		!strings.HasSuffix(msg, ": authentication_failed (bad_signature 1,130, expired 103)") {
		t.Errorf("summary %q; want like %q", msg, want)
	}
	if sum["refused"] != 1233.0 || sum["reason"] != "authentication_failed" || sum["level"] != "warn" {
		t.Errorf("summary fields: %v", sum)
	}
	if d := sum["details"].(map[string]any); d["bad_signature"] != 1130.0 || d["expired"] != 103.0 {
		t.Errorf("details: %v", d)
	}
	if _, ok := sum["interval_seconds"].(float64); !ok {
		t.Errorf("no interval_seconds: %v", sum)
	}
	// Quiet for a whole interval after the summary: the next refusal is logged at once again.
	time.Sleep(250 * time.Millisecond)
	s.Refused(AuthFailed, "expired", "10.0.0.2:1", "")
	if got := log.all(t); len(got) != 3 || got[2]["detail"] != "expired" {
		t.Fatalf("after a quiet interval: %v", got)
	}
	s.Close()
}

// Each kind is summed up on its own, at its own level.
func TestKindsAreSeparate(t *testing.T) {
	log := &lines{}
	s := New(zerolog.New(log), time.Hour)
	for range 3 {
		s.Refused(Denied, "produce", "10.0.0.1:1", "role \"bob\" may not produce persistent://public/default/t")
		s.Refused(TLSOnPlaintext, "", "10.0.0.3:1", "")
	}
	s.Close() // writes what was counted
	got := log.all(t)
	if len(got) != 4 {
		t.Fatalf("got %d lines; want 4", len(got))
	}
	if got[0]["message"] != "denied a request (produce)" || got[0]["level"] != "info" ||
		got[1]["message"] != "refused a client: tls_on_plaintext_port" || got[1]["level"] != "warn" {
		t.Errorf("first lines: %v", got[:2])
	}
	if m := got[2]["message"].(string); !strings.HasSuffix(m, ": denied (produce 2)") || !strings.HasPrefix(m, "refused 2 requests in the last") {
		t.Errorf("denied summary: %q", m)
	}
	if m := got[3]["message"].(string); !strings.HasSuffix(m, ": tls_on_plaintext_port") || !strings.HasPrefix(m, "refused 2 clients in the last ") {
		t.Errorf("tls summary: %q", m)
	}
}

// A client cannot grow a summary: details beyond the bound count as "other".
func TestDetailsAreBounded(t *testing.T) {
	log := &lines{}
	s := New(zerolog.New(log), time.Hour)
	s.Refused(BadFrame, "first", "", "")
	for i := range 100 {
		s.Refused(BadFrame, fmt.Sprintf("d%02d", i), "", "")
	}
	s.Close()
	got := log.all(t)
	d := got[len(got)-1]["details"].(map[string]any)
	if len(d) != maxDetails+1 || d["other"] != float64(100-maxDetails) {
		t.Fatalf("details: %v", d)
	}
}

func TestNilSummary(t *testing.T) {
	var s *Summary
	s.Refused(AuthFailed, "expired", "", "")
	s.Close()
}

func TestThousands(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", 100000: "100,000"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q; want %q", n, got, want)
		}
	}
}
