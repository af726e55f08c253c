package brokers

import (
	"errors"
	"strings"
	"testing"
)

func TestParseBrokerURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		addr    string
		tls     bool
		wantErr string
	}{
		{in: "pulsar://127.0.0.1:6650", addr: "127.0.0.1:6650"},
		{in: "pulsar+ssl://Broker-0.Pulsar.svc:6651", addr: "broker-0.pulsar.svc:6651", tls: true},
		{in: "pulsar://[::1]:6650", addr: "[::1]:6650"},
		{in: "http://127.0.0.1:8080", wantErr: "scheme"},
		{in: "pulsar://127.0.0.1", wantErr: "host and port"},
		{in: "pulsar://127.0.0.1:6650/admin", wantErr: "only scheme://host:port"},
		{in: "pulsar://u:p@127.0.0.1:6650", wantErr: "only scheme://host:port"},
	} {
		b, err := ParseURL(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || b.Addr() != tc.addr || b.TLS != tc.tls {
			t.Errorf("%s: got %+v %v", tc.in, b, err)
		}
	}
}

func TestAllowOnlyKnownBrokers(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://127.0.0.1:6650", "pulsar://broker-1.pulsar:6651")
	set := NewSet(d, Options{})
	for target, ok := range map[string]bool{
		"127.0.0.1:6650":               true,
		"pulsar://127.0.0.1:6650":      true,
		"BROKER-1.pulsar:6651":         true,
		"127.0.0.1:6651":               false, // known host, other port
		"127.0.0.1:22":                 false,
		"127.0.0.1:8080":               false,
		"localhost:6650":               false, // same machine, but not as discovery names it
		"broker-1.pulsar:6651/x":       false,
		"evil.example:6650":            false,
		"":                             false,
		"pulsar://127.0.0.1:6650/path": false,
		// Other spellings of a known host:port are not it.
		"127.0.0.1:06650":           false,
		"127.0.0.1:+6650":           false,
		"[127.0.0.1]:6650":          false,
		"broker-1.pulsar.:6651":     false,
		"pulsar://[127.0.0.1]:6650": false,
	} {
		_, err := set.Allow(target)
		if ok != (err == nil) {
			t.Errorf("Allow(%q) err = %v, want allowed=%v", target, err, ok)
		}
		if err != nil && !errors.Is(err, ErrTargetNotAllowed) {
			t.Errorf("Allow(%q) err = %v, want ErrTargetNotAllowed", target, err)
		}
	}
}

// ParseTarget takes only a DNS name or an IP literal on a plain decimal port, whatever
// discovery or the patterns would say of it.
func TestParseTargetSyntax(t *testing.T) {
	for target, want := range map[string]string{
		"broker-0.pulsar.svc:6650":           "broker-0.pulsar.svc:6650",
		"[fd00::1]:6651":                     "[fd00::1]:6651",
		"pulsar+ssl://B0:6651":               "b0:6651",
		"b0:06650":                           "",
		"b0:65536":                           "",
		"b0:0":                               "",
		"b0.:6650":                           "",
		"b..0:6650":                          "",
		"b_0:6650":                           "",
		"-b0:6650":                           "",
		"b0 :6650":                           "",
		"b0%2e:6650":                         "",
		"fd00::1:6650":                       "",
		"[b0]:6650":                          "",
		"[fe80::1%25eth0]:6650":              "",
		"127.1:6650":                         "",
		strings.Repeat("a", 64) + ":6650":    "",
		strings.Repeat("a.", 127) + "a:6650": "",
	} {
		host, port, err := ParseTarget(target)
		got := ""
		if err == nil {
			got = Broker{Host: host, Port: port}.Addr()
		}
		if got != want {
			t.Errorf("ParseTarget(%q) = %q (%v), want %q", target, got, err, want)
		}
	}
}
