package jsonlog

import (
	"log"
	"strings"

	"github.com/rs/zerolog"
)

// StdLogger is a standard library logger for a server's own error lines (net/http's
// ErrorLog) that writes each line as a JSON line of l: left nil, net/http writes plain text
// to standard error, in the middle of the JSON log. A client's failed TLS handshake (a port
// scan, a client without the CA) is at debug; anything else the server reports at warn.
func StdLogger(l zerolog.Logger, msg string) *log.Logger {
	return log.New(stdWriter{l: l, msg: msg}, "", 0)
}

type stdWriter struct {
	l   zerolog.Logger
	msg string
}

func (w stdWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := zerolog.WarnLevel
	if strings.HasPrefix(line, "http: TLS handshake error") {
		level = zerolog.DebugLevel
	}
	w.l.WithLevel(level).Str("error", line).Msg(w.msg)
	return len(p), nil
}
