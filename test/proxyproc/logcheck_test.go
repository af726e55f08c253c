package proxyproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A proxy's log is held to jsonlog's rules, but for the process's own exit message.
func TestCheckLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy.log")
	log := `{"level":"info","message":"pulsar-proxy started"}
pulsar-proxy: listen.pulsar: address already in use
{"level":"debug","refusal":"bad token","message":"refusing client","message":"x"}
panic: runtime error
{"level":"info","message":"pulsar-proxy stopped"}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := CheckLog(path)
	if len(errs) != 2 || !strings.HasPrefix(errs[0].Error(), `line 3: duplicate key "message"`) || !strings.HasPrefix(errs[1].Error(), "line 4: not JSON") {
		t.Fatalf("CheckLog = %v", errs)
	}
}

// LogsMain turns a passing run into a failure when a proxy's log broke the rules.
func TestLogsMain(t *testing.T) {
	badLogs.mu.Lock()
	saved := badLogs.found
	badLogs.found = nil
	badLogs.mu.Unlock()
	defer func() { badLogs.mu.Lock(); badLogs.found = saved; badLogs.mu.Unlock() }()
	if got := LogsMain(0); got != 0 {
		t.Fatalf("LogsMain(0) with clean logs = %d", got)
	}
	(&Proc{LogPath: writeLog(t, `{"a":1,"a":2}`)}).checkAtExit()
	if got := LogsMain(0); got != 1 {
		t.Fatalf("LogsMain(0) with a bad log = %d; want 1", got)
	}
	if got := LogsMain(2); got != 2 {
		t.Fatalf("LogsMain(2) = %d; want the tests' own code", got)
	}
}

func writeLog(t *testing.T, content string) string {
	path := filepath.Join(t.TempDir(), "proxy.log")
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
