package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// typeErrorCases: a wrong value for each kind of setting Config has, in the file and in the
// environment, and the words each error must have: the key path (or the variable and the key
// path), the line, what the key wants and what it was given, never yaml.v3's or Go's wording.
var typeErrorCases = []struct {
	kind     reflect.Type // the setting's type: TestTypeErrorsCoverEveryKind holds the table to Config
	yaml     string
	want     string
	env      string // a variable with a bad value for the same kind ("" = the environment cannot hold this mistake)
	wantEnv  string
	okYAML   string // a right value of this kind, which must load
	okValue  any    // what okYAML sets it to
	okSetter func(*Config) any
}{
	{kind: reflect.TypeFor[string](), yaml: "listen: {pulsar: [a, b]}",
		want:   `config.yaml: listen.pulsar: line 1: want a string, got a list`,
		okYAML: "listen: {pulsar: \"127.0.0.1:6650\"}", okValue: "127.0.0.1:6650", okSetter: func(c *Config) any { return c.Listen.Pulsar }},
	{kind: reflect.TypeFor[int](), yaml: "session:\n  maxConnections: lots",
		want: `config.yaml: session.maxConnections: line 2: want a whole number, got a string "lots"`,
		env:  "PULSAR_PROXY_SESSION_MAX_CONNECTIONS=1.5", wantEnv: `environment: PULSAR_PROXY_SESSION_MAX_CONNECTIONS (session.maxConnections): want a whole number, got "1.5"`,
		okYAML: "session: {maxConnections: 10}", okValue: 10, okSetter: func(c *Config) any { return c.Session.MaxConnections }},
	{kind: reflect.TypeFor[int64](), yaml: "admin:\n  maxRequestBodySize: 1.5",
		want: `config.yaml: admin.maxRequestBodySize: line 2: want a whole number, got the number 1.5`,
		env:  "PULSAR_PROXY_ADMIN_MAX_REQUEST_BODY_SIZE=1MiB", wantEnv: `(admin.maxRequestBodySize): want a whole number, got "1MiB"`,
		okYAML: "admin: {maxRequestBodySize: 2048}", okValue: int64(2048), okSetter: func(c *Config) any { return c.Admin.MaxBodySize }},
	{kind: reflect.TypeFor[float64](), yaml: "session:\n  connectionRatePerIP: fast",
		want: `config.yaml: session.connectionRatePerIP: line 2: want a number, got a string "fast"`,
		env:  "PULSAR_PROXY_SESSION_CONNECTION_RATE_PER_IP=fast", wantEnv: `(session.connectionRatePerIP): want a number, got "fast"`,
		okYAML: "session: {connectionRatePerIP: 2.5}", okValue: 2.5, okSetter: func(c *Config) any { return c.Session.ConnectionRatePerIP }},
	{kind: reflect.TypeFor[bool](), yaml: "broker:\n  multiplex: yes please",
		want: `config.yaml: broker.multiplex: line 2: want true or false, got a string "yes please"`,
		env:  "PULSAR_PROXY_BROKER_MULTIPLEX=on", wantEnv: `(broker.multiplex): want true or false, got "on"`,
		okYAML: "broker: {multiplex: true}", okValue: true, okSetter: func(c *Config) any { return c.Broker.Multiplex }},
	{kind: reflect.TypeFor[time.Duration](), yaml: "broker:\n  dialTimeout: 5",
		want: `config.yaml: broker.dialTimeout: line 2: want a duration with its unit, such as "5s" or "2m", got the number 5`,
		env:  "PULSAR_PROXY_BROKER_DIAL_TIMEOUT=5", wantEnv: `(broker.dialTimeout): want a duration with its unit, such as "5s" or "2m", got "5"`,
		okYAML: "broker: {dialTimeout: 1m30s}", okValue: 90 * time.Second, okSetter: func(c *Config) any { return c.Broker.DialTimeout }},
	{kind: reflect.TypeFor[TLSVersion](), yaml: "tls:\n  minVersion: TLSv1.2",
		want: `config.yaml: tls.minVersion: line 2: want a TLS version: 1.0, 1.1, 1.2 or 1.3, got a string "TLSv1.2"`,
		env:  "PULSAR_PROXY_TLS_MIN_VERSION=1.4", wantEnv: `(tls.minVersion): want a TLS version: 1.0, 1.1, 1.2 or 1.3, got "1.4"`,
		okYAML: "tls: {minVersion: 1.3}", okValue: TLSVersion(0x0304), okSetter: func(c *Config) any { return c.TLS.MinVersion }},
	{kind: reflect.TypeFor[[]string](), yaml: "discovery:\n  static:\n    brokers: pulsar://b:6650",
		want:   `config.yaml: discovery.static.brokers: line 3: want a list of strings, got a string "pulsar://b:6650"`,
		okYAML: "broker: {allowedHosts: [\"*.pulsar\", b.pulsar]}", okValue: []string{"*.pulsar", "b.pulsar"}, okSetter: func(c *Config) any { return c.Broker.AllowedHosts }},
	{kind: reflect.TypeFor[[]int](), yaml: "broker:\n  allowedPorts: [6650, six]",
		want: `config.yaml: broker.allowedPorts[1]: line 2: want a whole number, got a string "six"`,
		env:  "PULSAR_PROXY_BROKER_ALLOWED_PORTS=6650,six", wantEnv: `(broker.allowedPorts): want a comma-separated list of whole numbers, got [1] "six"`,
		okYAML: "broker: {allowedPorts: [6650, 7650]}", okValue: []int{6650, 7650}, okSetter: func(c *Config) any { return c.Broker.AllowedPorts }},
	{kind: reflect.TypeFor[Prefixes](), yaml: "proxyProtocol:\n  trustedCIDRs:\n    - 10.0.0.0/8\n    - 10.0.0.1",
		want: `config.yaml: proxyProtocol.trustedCIDRs[1]: line 4: want a CIDR such as 10.0.0.0/8, got a string "10.0.0.1"`,
		env:  "PULSAR_PROXY_PROXY_PROTOCOL_TRUSTED_CIDRS=10.0.0.0/8,10.0.0.0/33", wantEnv: `(proxyProtocol.trustedCIDRs): want a comma-separated list of CIDRs such as 10.0.0.0/8, got [1] "10.0.0.0/33"`,
		okYAML: "proxyProtocol: {trustedCIDRs: [10.0.0.0/8]}", okValue: "[10.0.0.0/8]", okSetter: func(c *Config) any { return fmt.Sprint(c.ProxyProtocol.TrustedCIDRs) }},
}

// TestTypeErrors: a value of the wrong type is refused in plain words, naming the key path
// and its line (the file) or the variable and the key path (the environment), for every kind
// of setting; a right value of each kind loads.
func TestTypeErrors(t *testing.T) {
	for _, tc := range typeErrorCases {
		t.Run(tc.kind.String(), func(t *testing.T) {
			_, err := Load(writeFile(t, tc.yaml), brokersEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("file: err = %v\nwant %q", err, tc.want)
			}
			if err != nil && (strings.Contains(err.Error(), "unmarshal") || strings.Contains(err.Error(), "!!")) {
				t.Errorf("file: yaml.v3's wording: %v", err)
			}
			if tc.env != "" {
				_, err := Load("", append([]string{tc.env}, brokersEnv...))
				if err == nil || !strings.Contains(err.Error(), tc.wantEnv) {
					t.Errorf("environment: err = %v\nwant %q", err, tc.wantEnv)
				}
			}
			cfg, err := Load(writeFile(t, tc.okYAML), brokersEnv)
			if err != nil {
				t.Fatalf("a right value: %v", err)
			}
			if got := tc.okSetter(cfg); !reflect.DeepEqual(got, tc.okValue) {
				t.Errorf("a right value: got %#v, want %#v", got, tc.okValue)
			}
		})
	}
}

// TestTypeErrorsCoverEveryKind: every type of setting in Config has words of its own
// (kindOf) and a case in typeErrorCases, so that a new kind cannot slip past in Go's words.
func TestTypeErrorsCoverEveryKind(t *testing.T) {
	tested := map[reflect.Type]bool{}
	for _, tc := range typeErrorCases {
		tested[tc.kind] = true
	}
	walk(func(s setting) {
		if s.env == "" {
			return
		}
		ty := s.field.Type
		if ty.Kind() == reflect.Slice {
			if _, ok := kindOf(ty.Elem()); !ok {
				t.Errorf("%s: no words for a list of %s", s.path, ty.Elem())
			}
		} else if _, ok := kindOf(ty); !ok {
			t.Errorf("%s: no words for %s", s.path, ty)
		}
		if !tested[ty] {
			t.Errorf("%s: no case of type %s in typeErrorCases", s.path, ty)
		}
	})
}

// TestFileErrors: the shape of the file itself (sections, keys) is refused in plain words
// too, and every unknown key is named with the key it probably was.
func TestFileErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"a section given a value", "auth: true", `config.yaml: auth: line 1: want a section of keys, got true`},
		{"a setting given a section", "broker: {dialTimeout: {s: 5}}", `config.yaml: broker.dialTimeout: line 1: want a duration with its unit, such as "5s" or "2m", got a section of keys`},
		{"a file that is a list", "- listen\n- broker\n", `config.yaml: line 1: want sections of keys (listen:, discovery:, ...), got a list`},
		{"a key that is a list", "? [a, b]\n: 1\n", `config.yaml: line 1: want a key name, got a list`},
		{"a key set twice", "broker:\n  dialTimeout: 1s\n  dialTimeout: 2s\n", `config.yaml: broker.dialTimeout: line 3: set twice (first on line 2); keep one`},
		{"a section set twice", "log: {level: info}\nlog: {format: json}\n", `config.yaml: log: line 2: set twice (first on line 1)`},
		{"a misspelt key", "broker:\n  multiplx: true\n", `config.yaml: line 2: unknown key "multiplx" in broker; did you mean broker.multiplex?`},
		{"a key in the wrong section", "session:\n  multiplex: true\n", `config.yaml: line 2: unknown key "multiplex" in session; did you mean broker.multiplex?`},
		{"letter case", "broker: {DialTimeout: 5s}", `unknown key "DialTimeout" in broker; did you mean broker.dialTimeout?`},
		{"a section left out", "discovery:\n  brokers: [pulsar://b:6650]\n", `unknown key "brokers" in discovery; did you mean discovery.static.brokers?`},
		{"a misspelt section", "lisen: {}\n", `config.yaml: line 1: unknown key "lisen" at top level; did you mean listen?`},
		{"a setting at top level", "brokers: [pulsar://b:6650]\n", `unknown key "brokers" at top level; did you mean discovery.static.brokers?`},
		{"a list item of the wrong kind", "admin: {functionWorkers: [http://w:6750, [x]]}", `config.yaml: admin.functionWorkers[1]: line 1: want a string, got a list`},
		{"a list item left empty", "broker: {allowedPorts: [6650, ~]}", `config.yaml: broker.allowedPorts[1]: line 1: want a whole number, got nothing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.yaml), brokersEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant %q", err, tc.want)
			}
		})
	}
	// No guess where nothing is near.
	_, err := Load(writeFile(t, "broker: {zzzzzz: 1}"), brokersEnv)
	if err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("err = %v", err)
	}
}

// TestFileForms: what YAML allows beside plain keys still loads as YAML means it: a key given
// no value leaves its default (and empties a list), aliases stand for their anchors, and a
// merge key's settings yield to the section's own wherever they stand.
func TestFileForms(t *testing.T) {
	cfg, err := Load(writeFile(t, `
timeouts: &t {dialTimeout: 7s, connectTimeout: 8s}
`), brokersEnv)
	if err == nil {
		t.Fatalf("an unknown top-level key loaded: %+v", cfg)
	}
	cfg, err = Load(writeFile(t, `
broker:
  connectTimeout: 9s
  <<: &t {dialTimeout: 7s, connectTimeout: 8s}
  lookupTimeout: &l 11s
session:
  handshakeTimeout: *l
  drainTimeout:
  ipv6PrefixLength: ~
discovery:
  healthCheckInterval:
  static: {brokers: [pulsar://a:6650]}
admin:
  functionWorkers:
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := defaults()
	if b := cfg.Broker; b.DialTimeout != 7*time.Second || b.ConnectTimeout != 9*time.Second || b.LookupTimeout != 11*time.Second {
		t.Errorf("merge and anchors: %+v", b)
	}
	if s := cfg.Session; s.HandshakeTimeout != 11*time.Second || s.DrainTimeout != d.Session.DrainTimeout || s.IPv6PrefixLength != 64 {
		t.Errorf("alias and keys without a value: %+v", s)
	}
	if cfg.Discovery.HealthCheckInterval != d.Discovery.HealthCheckInterval || cfg.Admin.FunctionWorkers != nil {
		t.Errorf("keys without a value: %+v %+v", cfg.Discovery, cfg.Admin)
	}
}
