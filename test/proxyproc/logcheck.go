package proxyproc

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
)

// exitMessage starts the one line the process writes outside its JSON log: the error it
// exits with (cmd/pulsar-proxy prints "pulsar-proxy: " and the error on standard error, before
// a logger exists or after it is done).
const exitMessage = "pulsar-proxy: "

// CheckLog holds a proxy's log to jsonlog's rules: every line one JSON object with no key
// twice, but for the process's exit message. It returns one error per bad line (at most 20).
func CheckLog(path string) []error {
	b, err := os.ReadFile(path)
	if err != nil {
		return []error{err}
	}
	var kept [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte(exitMessage)) {
			kept = append(kept, line)
		} else {
			kept = append(kept, nil) // keeps the line numbers
		}
	}
	return jsonlog.Check(bytes.Join(kept, []byte("\n")), 20)
}

// badLogs are the logs of the proxies this process ran that broke the rules, for LogsMain.
var badLogs struct {
	mu    sync.Mutex
	found []string
}

// checkAtExit checks the log once the process has exited; a bad log is kept for the test
// (LogErrors) and for LogsMain.
func (p *Proc) checkAtExit() {
	p.logErrs = CheckLog(p.LogPath)
	if len(p.logErrs) == 0 {
		return
	}
	badLogs.mu.Lock()
	defer badLogs.mu.Unlock()
	badLogs.found = append(badLogs.found, describe(p.LogPath, p.logErrs))
}

func describe(path string, errs []error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s breaks the log's rules (one JSON object a line, no key twice):", path)
	for _, err := range errs {
		b.WriteString("\n  " + err.Error())
	}
	return b.String()
}

// LogErrors are the bad lines of the proxy's log (see CheckLog), once it has exited: nil
// while it runs.
func (p *Proc) LogErrors() []error {
	select {
	case <-p.exited:
		return p.logErrs
	default:
		return nil
	}
}

// LogsMain is for a test package's TestMain, after m.Run: code, or 1 when a proxy that any of
// its tests ran wrote a line that is not one JSON object or has a key twice (each is printed),
// so that every proxy of the e2e suites is held to the log's rules, whoever started it.
func LogsMain(code int) int {
	badLogs.mu.Lock()
	defer badLogs.mu.Unlock()
	for _, f := range badLogs.found {
		fmt.Println("FAIL:", f)
	}
	if len(badLogs.found) > 0 && code == 0 {
		return 1
	}
	return code
}
