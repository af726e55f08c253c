package brokerhost

import (
	"strings"
	"testing"
)

func TestSplitHostPort(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		in, host, port string // host "" = refused
	}{
		{"broker-0.pulsar.svc:6650", "broker-0.pulsar.svc", "6650"},
		{"Broker-0.Pulsar:6651", "broker-0.pulsar", "6651"},
		{"10.0.0.1:6650", "10.0.0.1", "6650"},
		{"[::1]:6650", "::1", "6650"},
		{"[FD00::A]:65535", "fd00::a", "65535"},
		{"b:1", "b", "1"},
		{long + "." + long + "." + long + "." + long[:61] + ":6650", long + "." + long + "." + long + "." + long[:61], "6650"},
		{long + "." + long + "." + long + "." + long[:62] + ":6650", "", ""}, // 254 characters
		{long + "a.b:6650", "", ""}, // a label of 64
		{"", "", ""},
		{":6650", "", ""},
		{"b", "", ""},
		{"b:", "", ""},
		{"b:0", "", ""},
		{"b:06650", "", ""},
		{"b:+6650", "", ""},
		{"b:-1", "", ""},
		{"b:65536", "", ""},
		{"b:6650000000000000000000", "", ""},
		{"b: 6650", "", ""},
		{"::1:6650", "", ""},        // IPv6 without brackets
		{"[10.0.0.1]:6650", "", ""}, // brackets around IPv4
		{"[b]:6650", "", ""},
		{"[::1]6650", "", ""},
		{"[::1:6650", "", ""},
		{"[fe80::1%eth0]:6650", "", ""},
		{"b.:6650", "", ""},
		{".b:6650", "", ""},
		{"a..b:6650", "", ""},
		{"-a.b:6650", "", ""},
		{"a-.b:6650", "", ""},
		{"a_b:6650", "", ""},
		{"a b:6650", "", ""},
		{"a/b:6650", "", ""},
		{"u@b:6650", "", ""},
		{"b%30:6650", "", ""},
		{"b\x00:6650", "", ""},
		{"*.b:6650", "", ""},
		{"127.1:6650", "", ""},
		{"0x7f000001:6650", "", ""},
		{"01.2.3.4:6650", "", ""},
		{"2130706433:6650", "", ""},
		{"123.example:6650", "123.example", "6650"},
		{"a.1b:6650", "a.1b", "6650"},
	} {
		host, port, err := SplitHostPort(tc.in)
		if tc.host == "" {
			if err == nil {
				t.Errorf("SplitHostPort(%q) = %q %q, want an error", tc.in, host, port)
			}
			continue
		}
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("SplitHostPort(%q) = %q %q %v, want %q %q", tc.in, host, port, err, tc.host, tc.port)
		}
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		tls     bool
		addr    string
		wantErr string
	}{
		{in: "pulsar://b:6650", addr: "b:6650"},
		{in: "PULSAR+SSL://B:6651/", tls: true, addr: "b:6651"},
		{in: "pulsar://[::1]:6650", addr: "::1:6650"},
		{in: "http://b:6650", wantErr: "scheme"},
		{in: "b:6650", wantErr: "scheme"},
		{in: "pulsar:b:6650", wantErr: "scheme"},
		{in: "pulsar://b", wantErr: "host and port"},
		{in: "pulsar://b:6650//", wantErr: "only scheme://host:port"},
		{in: "pulsar://b:6650/x", wantErr: "only scheme://host:port"},
		{in: "pulsar://b:6650?x", wantErr: "only scheme://host:port"},
		{in: "pulsar://b:6650#x", wantErr: "only scheme://host:port"},
		{in: "pulsar://u:p@b:6650", wantErr: "only scheme://host:port"},
		{in: "pulsar://a:6650,b:6650", wantErr: "brackets"},
		{in: "pulsar://b.evil%2Eexample:6650", wantErr: "not allowed"},
	} {
		tls, host, port, err := ParseURL(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || tls != tc.tls || host+":"+port != tc.addr {
			t.Errorf("%s: got %v %q %q %v", tc.in, tls, host, port, err)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	for _, ok := range []string{"*.broker.pulsar.svc.cluster.local", "pulsar-broker-*", "broker-?.pulsar", "*", "10.0.0.*", "B*-x.Example"} {
		if err := CheckPattern(ok); err != nil {
			t.Errorf("CheckPattern(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "*.", ".*", "a..b", "a/b", "a/*", "[a-z]", "a\\*", "a:b", "*:6650", "a b", "-*.b", "*-.b", "a_b",
		strings.Repeat("*", 64), strings.Repeat("*.", 127) + "*"} {
		if err := CheckPattern(bad); err == nil {
			t.Errorf("CheckPattern(%q) accepted", bad)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"pulsar-broker-*", "pulsar-broker-1", true},
		{"pulsar-broker-*", "pulsar-broker-1.evil.example", false}, // the finding: '*' crossed the dots
		{"pulsar-broker-*", "pulsar-broker-", true},
		{"*.broker.pulsar.svc", "broker-7.broker.pulsar.svc", true},
		{"*.broker.pulsar.svc", "a.b.broker.pulsar.svc", false},
		{"*.broker.pulsar.svc", "broker.pulsar.svc", false},
		{"*.broker.pulsar.svc", "x.broker.pulsar.svc.evil", false},
		{"*.Broker.Pulsar.SVC", "X.broker.pulsar.svc", true},
		{"broker-?.pulsar", "broker-1.pulsar", true},
		{"broker-?.pulsar", "broker-10.pulsar", false},
		{"b*r*r", "brokerr", true},
		{"b*r*r", "brokers", false},
		{"*x*", "axb", true},
		{"**", "a", true},
		{"*", "", true},
		{"*", "a.b", false},
		{"10.0.0.*", "10.0.0.7", true},
		{"10.0.0.*", "10.0.1.7", false},
		{"*", "::1", false}, // IPv6 literals match no pattern
		{"[a-z]", "a", false},
		{"a", "a.", false},
	} {
		if got := Match(tc.pattern, tc.host); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
}

func TestParseWebURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		tls     bool
		addr    string
		wantErr string
	}{
		{in: "http://b:8080", addr: "b:8080"},
		{in: "HTTPS://B.Example:8443/", tls: true, addr: "b.example:8443"},
		{in: "http://[::1]:8080", addr: "::1:8080"},
		{in: "pulsar://b:6650", wantErr: "scheme"},
		{in: "b:8080", wantErr: "scheme"},
		{in: "http://b", wantErr: "host and port"},
		{in: "http://b:080", wantErr: "port"},
		{in: "http://b:8080/admin", wantErr: "only scheme://host:port"},
		{in: "http://b:8080?x", wantErr: "only scheme://host:port"},
		{in: "http://u:p@b:8080", wantErr: "only scheme://host:port"},
		{in: "http://127.1:8080", wantErr: "neither"},
	} {
		tls, host, port, err := ParseWebURL(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || tls != tc.tls || host+":"+port != tc.addr {
			t.Errorf("%s: got %v %q %q %v", tc.in, tls, host, port, err)
		}
	}
}
