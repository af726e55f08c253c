package proxy

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

// TestStartWarningsAreWarnings: the proxy logs, as it starts, exactly the warnings Warnings
// lists (which check-config prints), one line each with the setting's key, and each implied
// setting at info.
func TestStartWarningsAreWarnings(t *testing.T) {
	// The admin API without web brokers, PROXY trust of everything, broker.multiplex over an
	// explicit passthrough.
	cfg := loadConfig(t, "127.0.0.1:6650", "PULSAR_PROXY_PROXY_PROTOCOL_TRUSTED_CIDRS=0.0.0.0/0",
		"PULSAR_PROXY_BROKER_MULTIPLEX=true", "PULSAR_PROXY_SESSION_PASSTHROUGH=true")
	want := Warnings(cfg)
	if len(want) < 3 {
		t.Fatalf("Warnings: %+v", want)
	}
	var log logBuffer
	p, err := Build(cfg, Options{Version: "test", LogOutput: &log})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	var warned []config.Warning
	implied := 0
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var l struct{ Level, Setting, Message, Value string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		switch {
		case l.Level == "warn":
			warned = append(warned, config.Warning{Key: l.Setting, Message: strings.TrimPrefix(l.Message, l.Setting+": ")})
		case l.Level == "info" && l.Setting == "session.passthrough" && l.Value == "false":
			implied++
		}
	}
	if len(warned) != len(want) {
		t.Fatalf("logged %+v\nwant %+v", warned, want)
	}
	for i := range want {
		if warned[i] != want[i] {
			t.Errorf("logged %+v, want %+v", warned[i], want[i])
		}
	}
	if implied != 1 {
		t.Errorf("the implied session.passthrough logged %d times:\n%s", implied, log.String())
	}
}

// TestDescriptorReserveWarning: a reserve over half the open-files limit, which the budget
// cuts to half, is among the start warnings; within it, it is not.
func TestDescriptorReserveWarning(t *testing.T) {
	cfg := loadConfig(t, "127.0.0.1:6650", "PULSAR_PROXY_SESSION_DESCRIPTOR_RESERVE=1024",
		"PULSAR_PROXY_DISCOVERY_STATIC_WEB_BROKERS=http://127.0.0.1:8080")
	has := func(ws []config.Warning) bool {
		for _, w := range ws {
			if w.Key == "session.descriptorReserve" && strings.Contains(w.Message, "1000") && strings.Contains(w.Message, "500 is kept back") {
				return true
			}
		}
		return false
	}
	if ws := warnings(cfg, 1000); !has(ws) {
		t.Errorf("limit 1000: %+v", ws)
	}
	if ws := warnings(cfg, 4096); has(ws) || len(ws) != 0 {
		t.Errorf("limit 4096: %+v", ws)
	}
}

// TestEncodedSecretKeyWarning: a secret key file of base64 text is a key of those bytes (as
// Pulsar reads it), which the proxy says at start, since brokers given the decoded key would
// hold another; a key of random bytes draws no warning.
func TestEncodedSecretKeyWarning(t *testing.T) {
	dir := t.TempDir()
	raw := make([]byte, 32)
	rand.Read(raw)
	for name, tc := range map[string]struct {
		content []byte
		warned  bool
	}{
		"base64 text": {[]byte(base64.StdEncoding.EncodeToString(raw) + "\n"), true},
		"raw bytes":   {raw, false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := loadConfig(t, "127.0.0.1:6650", "PULSAR_PROXY_AUTH_TOKEN_SECRET_KEY_FILE="+path)
		warned := false
		for _, w := range warnings(cfg, 0) {
			warned = warned || w.Key == "auth.token.secretKeyFile" && strings.Contains(w.Message, "base64 text")
		}
		if warned != tc.warned {
			t.Errorf("%s: warned %v, want %v: %+v", name, warned, tc.warned, warnings(cfg, 0))
		}
	}
}
