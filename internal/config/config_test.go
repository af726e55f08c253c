package config

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
)

const examplePath = "../../config.example.yaml"

// brokersEnv supplies the one setting that has no default.
var brokersEnv = []string{"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar://b0:6650"}

func withBrokers(brokers ...string) *Config {
	c := defaults()
	c.Discovery.Static.Brokers = brokers
	return c
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name string
		yaml *string // nil: no file
		env  []string
		want *Config
	}{
		{
			name: "defaults",
			env:  brokersEnv,
			want: withBrokers("pulsar://b0:6650"),
		},
		{
			name: "empty file",
			yaml: ptr(""),
			env:  brokersEnv,
			want: withBrokers("pulsar://b0:6650"),
		},
		{
			name: "only comments",
			yaml: ptr("# nothing set\n"),
			env:  brokersEnv,
			want: withBrokers("pulsar://b0:6650"),
		},
		{
			name: "yaml overrides defaults",
			yaml: ptr(`
listen:
  pulsar: "127.0.0.1:0"
discovery:
  static:
    brokers: [pulsar://a:6650, "pulsar://[::1]:6651"]
  healthCheckInterval: 750ms
broker:
  maxLookupRedirects: 3
session:
  maxConnections: 100
  maxConnectionsPerIP: 5
  drainTimeout: 1m30s
log:
  level: debug
  format: console
`),
			want: func() *Config {
				c := withBrokers("pulsar://a:6650", "pulsar://[::1]:6651")
				c.Listen.Pulsar = "127.0.0.1:0"
				c.Discovery.HealthCheckInterval = 750 * time.Millisecond
				c.Broker.MaxLookupRedirects = 3
				c.Session.MaxConnections = 100
				c.Session.MaxConnectionsPerIP = 5
				c.Session.DrainTimeout = 90 * time.Second
				c.Log.Level = "debug"
				c.Log.Format = "console"
				return c
			}(),
		},
		{
			name: "env beats yaml",
			yaml: ptr(`
listen: {pulsar: "127.0.0.1:1", http: "127.0.0.1:2"}
discovery: {static: {brokers: [pulsar://yaml:6650]}}
broker: {dialTimeout: 1s, lookupConnectionsPerBroker: 2}
log: {level: warn, sessionSummary: info}
`),
			env: []string{
				"PULSAR_PROXY_LISTEN_PULSAR=127.0.0.1:3",
				"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar://e0:6650,pulsar://e1:6650",
				"PULSAR_PROXY_BROKER_DIAL_TIMEOUT=2s",
				"PULSAR_PROXY_LOG_LEVEL=error",
				"LOG_LEVEL=trace", // no prefix: not ours
			},
			want: func() *Config {
				c := withBrokers("pulsar://e0:6650", "pulsar://e1:6650")
				c.Listen.Pulsar = "127.0.0.1:3"
				c.Listen.HTTP = "127.0.0.1:2"
				c.Broker.DialTimeout = 2 * time.Second
				c.Broker.LookupConnectionsPerBroker = 2
				c.Log.Level = "error"
				c.Log.SessionSummary = "info"
				return c
			}(),
		},
	}
	tests = append(tests, struct {
		name string
		yaml *string
		env  []string
		want *Config
	}{
		name: "consul and dns from the environment, no static brokers",
		yaml: ptr("discovery: {dns: {record: SRV, refreshInterval: 30s}}\n"),
		env: []string{
			"PULSAR_PROXY_DISCOVERY_CONSUL_SERVICE=pulsar",
			"PULSAR_PROXY_DISCOVERY_CONSUL_TOKEN=secret",
			"PULSAR_PROXY_DISCOVERY_DNS_NAME=_pulsar._tcp.broker.pulsar.svc.cluster.local",
			"PULSAR_PROXY_BROKER_ALLOWED_PORTS=6650,16650",
			"PULSAR_PROXY_BROKER_ALLOWED_HOSTS=*.broker.pulsar.svc.cluster.local",
		},
		want: func() *Config {
			c := defaults()
			c.Discovery.Consul.Service = "pulsar"
			c.Discovery.Consul.Token = "secret"
			c.Discovery.DNS.Name = "_pulsar._tcp.broker.pulsar.svc.cluster.local"
			c.Discovery.DNS.Record = "SRV"
			c.Discovery.DNS.RefreshInterval = 30 * time.Second
			c.Broker.AllowedPorts = []int{6650, 16650}
			c.Broker.AllowedHosts = []string{"*.broker.pulsar.svc.cluster.local"}
			return c
		}(),
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != nil {
				path = writeFile(t, *tt.yaml)
			}
			got, err := Load(path, tt.env)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string // each must appear in the error
	}{
		{
			name: "unknown key names key, line and section",
			yaml: "listen:\n  pulsar: \":6650\"\n  listn: \":1\"\n",
			want: []string{`config.yaml: line 3: unknown key "listn" in listen`},
		},
		{
			name: "unknown keys all reported",
			yaml: "lisen: {}\ndiscovery:\n  static:\n    broker: [pulsar://a:1]\n",
			want: []string{
				`line 1: unknown key "lisen" at top level`,
				`line 4: unknown key "broker" in discovery.static`,
			},
		},
		{
			name: "bare number is not a duration",
			yaml: "broker:\n  dialTimeout: 5\n",
			want: []string{`config.yaml: broker.dialTimeout: line 2: want a duration with its unit, such as "5s" or "2m", got the number 5`},
		},
		{
			name: "syntax error names file and line",
			yaml: "listen:\n  pulsar: [\n",
			want: []string{"config.yaml: line"},
		},
		{
			name: "more than one document",
			yaml: "log: {level: info}\n---\nlog: {level: debug}\n",
			want: []string{"more than one YAML document"},
		},
		{
			name: "a discovery provider is required",
			want: []string{"discovery: no broker discovery configured: set discovery.static.brokers, discovery.consul.service, discovery.dns.name or discovery.metadataStore.url"},
		},
		{
			name: "bad DNS name",
			yaml: "discovery: {dns: {name: \"not a name\", record: MX}}",
			want: []string{`discovery.dns.name: "not a name" is not a DNS name`, `discovery.dns.record: "MX" is not one of A|SRV`},
		},
		{
			name: "static broker on a port that is not allowed",
			yaml: "discovery: {static: {brokers: [pulsar://b:16650]}}",
			want: []string{`discovery.static.brokers[0]: "pulsar://b:16650": port 16650 is not in broker.allowedPorts [6650 6651]`},
		},
		{
			name: "bad TLS and PROXY protocol settings",
			yaml: "discovery: {static: {brokers: [pulsar://b:6650]}}\nlisten: {pulsarTLS: \":6651\"}\n" +
				"tls: {clientAuth: require}\nproxyProtocol: {enabled: true, headerTimeout: 0s}",
			want: []string{"tls.certFile: listen.pulsarTLS needs tls.certFile and tls.keyFile",
				"tls.clientCAFile: tls.clientAuth require needs a client CA file", "proxyProtocol.trustedCIDRs: proxyProtocol.enabled needs",
				"proxyProtocol.headerTimeout: must be positive"},
		},
		{
			// Typed values are refused as the file is read, with their line.
			name: "TLS version that does not exist",
			yaml: "discovery: {static: {brokers: [pulsar://b:6650]}}\ntls:\n  minVersion: \"1.4\"\nbroker: {tls: {minVersion: [1.2]}}",
			want: []string{`config.yaml: tls.minVersion: line 3: want a TLS version: 1.0, 1.1, 1.2 or 1.3, got a string "1.4"`,
				`config.yaml: broker.tls.minVersion: line 4: want a TLS version: 1.0, 1.1, 1.2 or 1.3, got a list`},
		},
		{
			name: "CIDR list left empty",
			yaml: "discovery: {static: {brokers: [pulsar://b:6650]}}\nproxyProtocol: {enabled: true, trustedCIDRs: }",
			want: []string{"proxyProtocol.trustedCIDRs: proxyProtocol.enabled needs at least one"},
		},
		{
			name: "TLS version from the environment",
			env:  append([]string{"PULSAR_PROXY_TLS_MIN_VERSION=TLSv1.2"}, brokersEnv...),
			want: []string{`environment: PULSAR_PROXY_TLS_MIN_VERSION (tls.minVersion): want a TLS version: 1.0, 1.1, 1.2 or 1.3, got "TLSv1.2"`},
		},
		{
			// Two sections have a MinVersion field: the error names the variable set.
			name: "broker TLS version from the environment",
			env:  append([]string{"PULSAR_PROXY_BROKER_TLS_MIN_VERSION=TLSv1.3"}, brokersEnv...),
			want: []string{`environment: PULSAR_PROXY_BROKER_TLS_MIN_VERSION (broker.tls.minVersion): want a TLS version`},
		},
		{
			name: "bad broker TLS and PROXY settings",
			yaml: "discovery: {static: {brokers: [pulsar+ssl://b:6651, pulsar://c:6650]}}\n" +
				"broker: {proxyProtocol: v3, tls: {minVersion: \"1.1\", certFile: c.pem}}",
			want: []string{`broker.proxyProtocol: "v3" is not one of`, `broker.tls.minVersion: "1.1" is not one of`,
				"broker.tls.certFile: certFile and keyFile go together",
				`discovery.static.brokers[0]: "pulsar+ssl://b:6651": pulsar+ssl:// URLs go with broker.tls.enabled: true`},
		},
		{
			name: "plaintext static broker with broker TLS on",
			yaml: "discovery: {static: {brokers: [pulsar://c:6650]}}\nbroker: {tls: {enabled: true}}",
			want: []string{`discovery.static.brokers[0]: "pulsar://c:6650": pulsar+ssl:// URLs go with`},
		},
		{
			name: "bad trusted CIDR",
			yaml: "discovery: {static: {brokers: [pulsar://b:6650]}}\nproxyProtocol:\n  enabled: true\n  trustedCIDRs: [10.0.0.0/8, 10.0.0.0/33, 10.0.0.1]",
			want: []string{`config.yaml: proxyProtocol.trustedCIDRs[1]: line 4: want a CIDR such as 10.0.0.0/8, got a string "10.0.0.0/33"`,
				`config.yaml: proxyProtocol.trustedCIDRs[2]: line 4: want a CIDR such as 10.0.0.0/8, got a string "10.0.0.1"`},
		},
		{
			name: "bad trusted CIDR from the environment",
			env:  append([]string{"PULSAR_PROXY_PROXY_PROTOCOL_TRUSTED_CIDRS=10.0.0.0/8,fd00::/129"}, brokersEnv...),
			want: []string{`environment: PULSAR_PROXY_PROXY_PROTOCOL_TRUSTED_CIDRS (proxyProtocol.trustedCIDRs): want a comma-separated list of CIDRs such as 10.0.0.0/8, got [1] "fd00::/129"`},
		},
		{
			name: "bad connection rate",
			yaml: "discovery: {static: {brokers: [pulsar://b:6650]}}\nsession: {connectionRatePerIP: -1, connectionBurstPerIP: 0}",
			want: []string{"session.connectionRatePerIP: must be 0 (unlimited) or greater", "session.connectionBurstPerIP: must be at least 1"},
		},
		{
			name: "bad consul and target settings",
			yaml: "discovery: {consul: {service: pulsar, waitTime: 11m, address: \"a b\"}}\nbroker: {allowedPorts: [0], allowedHosts: [\"[\"], learnedTargetLifetime: -1s}",
			want: []string{"discovery.consul.waitTime:", "discovery.consul.address:", "broker.allowedPorts[0]:",
				"broker.allowedHosts[0]:", "broker.learnedTargetLifetime:"},
		},
		{
			name: "bad broker URL",
			yaml: "discovery: {static: {brokers: [pulsar://ok:6650, http://b:6650]}}",
			want: []string{`discovery.static.brokers[1]: "http://b:6650": scheme must be`},
		},
		{
			name: "negative duration",
			yaml: "broker: {dialTimeout: -5s}",
			env:  brokersEnv,
			want: []string{"broker.dialTimeout: must be greater than 0, got -5s"},
		},
		{
			name: "unknown log level",
			yaml: "log: {level: loud}",
			env:  brokersEnv,
			want: []string{`log.level: "loud" is not one of trace|debug|info|warn|error`},
		},
		{
			name: "frame size too big",
			yaml: "session: {maxFrameSize: 134217729}",
			env:  brokersEnv,
			want: []string{"session.maxFrameSize: must be between 1024 and 134217728, got 134217729"},
		},
		{
			name: "bad env value names the variable",
			env:  []string{"PULSAR_PROXY_BROKER_DIAL_TIMEOUT=soon", "PULSAR_PROXY_SESSION_MAX_FRAME_SIZE=big"},
			want: []string{
				`environment: PULSAR_PROXY_BROKER_DIAL_TIMEOUT (broker.dialTimeout): want a duration with its unit, such as "5s" or "2m", got "soon"`,
				`environment: PULSAR_PROXY_SESSION_MAX_FRAME_SIZE (session.maxFrameSize): want a whole number, got "big"`,
			},
		},
		{
			name: "multiplex with what needs a broker connection per client",
			yaml: `
discovery: {static: {brokers: ["pulsar://a:6650"]}}
broker: {multiplex: true, multiplexConnections: 0, multiplexClientQueueBytes: 10, proxyProtocol: v2}
auth: {forwardClientCredentials: true}
`,
			want: []string{
				"broker.multiplex: cannot be on with auth.forwardClientCredentials",
				"broker.multiplex: cannot be on with broker.proxyProtocol",
				"broker.multiplexConnections:", "broker.multiplexClientQueueBytes:",
			},
		},
		{
			name: "all problems reported together",
			yaml: `
listen: {pulsar: "nohostport", http: ":99999"}
discovery: {static: {brokers: ["pulsar://a", "pulsar://a:1/x"]}, healthCheckInterval: 0s}
broker: {maxLookupRedirects: 0, lookupConnectionsPerBroker: 17}
session: {maxFrameSize: 10, maxPendingLookups: 0, maxConnections: -1, maxConnectionsPerIP: -1}
log: {level: loud, format: xml, sessionSummary: warn}
`,
			want: []string{
				"listen.pulsar:", "listen.http:",
				"discovery.static.brokers[0]:", "discovery.static.brokers[1]:",
				"discovery.healthCheckInterval:",
				"broker.maxLookupRedirects:", "broker.lookupConnectionsPerBroker:",
				"session.maxFrameSize:", "session.maxPendingLookups:", "session.maxConnections:", "session.maxConnectionsPerIP:",
				"log.level:", "log.format:", "log.sessionSummary:",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeFile(t, tt.yaml)
			}
			cfg, err := Load(path, tt.env)
			if err == nil {
				t.Fatalf("Load succeeded: %+v", cfg)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestTLSOnly: listen.pulsar may be empty beside listen.pulsarTLS (no plaintext Pulsar port,
// as Apache's proxy with servicePort empty); with neither the proxy would serve no client,
// which is refused naming both keys. (Only the file can say it: an empty environment variable
// leaves a setting as it was, for every setting.)
func TestTLSOnly(t *testing.T) {
	tlsOnly := "listen: {pulsar: \"\", pulsarTLS: \"0.0.0.0:6651\"}\ntls: {certFile: c.pem, keyFile: k.pem}\n"
	cfg, err := Load(writeFile(t, tlsOnly), brokersEnv)
	if err != nil {
		t.Fatalf("a TLS-only configuration is refused: %v", err)
	}
	if cfg.Listen.Pulsar != "" || cfg.Listen.PulsarTLS != "0.0.0.0:6651" {
		t.Errorf("listen %+v, want no plaintext listener and pulsarTLS 0.0.0.0:6651", cfg.Listen)
	}
	for name, yaml := range map[string]string{
		"neither listener":         "listen: {pulsar: \"\"}\n",
		"neither, TLS files given": "listen: {pulsar: \"\", pulsarTLS: \"\"}\ntls: {certFile: c.pem, keyFile: k.pem}\n",
	} {
		_, err := Load(writeFile(t, yaml), brokersEnv)
		if err == nil || !strings.Contains(err.Error(), "listen.pulsar: empty, and so are listen.pulsarTLS and listen.pulsarSNI") {
			t.Errorf("%s: %v, want listen.pulsar refused for want of listen.pulsarTLS", name, err)
		}
	}
	// TLS-only still needs the certificate it serves.
	_, err = Load(writeFile(t, "listen: {pulsar: \"\", pulsarTLS: \":6651\"}\n"), brokersEnv)
	if err == nil || !strings.Contains(err.Error(), "tls.certFile: listen.pulsarTLS needs tls.certFile and tls.keyFile") {
		t.Errorf("TLS-only without a certificate: %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), brokersEnv); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

// Load must read only the environ it is given, never the process's own.
func TestLoadIgnoresProcessEnv(t *testing.T) {
	t.Setenv("PULSAR_PROXY_LOG_LEVEL", "loud")
	if _, err := Load("", brokersEnv); err != nil {
		t.Fatal(err)
	}
}

func TestBrokerURL(t *testing.T) {
	for _, ok := range []string{
		"pulsar://broker:6650",
		"pulsar+ssl://broker.example:6651",
		"pulsar://10.0.0.1:6650",
		"pulsar://[fd00::1]:6650",
	} {
		if err := checkBrokerURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{
		"",
		"broker:6650",
		"pulsar:broker:6650",
		"http://broker:6650",
		"pulsar://broker",
		"pulsar://:6650",
		"pulsar://broker:0",
		"pulsar://broker:port",
		"pulsar://a:6650,b:6650",
		"pulsar://broker:6650/",
		"pulsar://broker:6650/x",
		"pulsar://broker:6650?x=1",
		"pulsar://user:pw@broker:6650",
		// Host and port as the proxy parses them: one spelling each.
		"pulsar://broker:06650",
		"pulsar://broker:+6650",
		"pulsar://broker.:6650",
		"pulsar://b..x:6650",
		"pulsar://b_0:6650",
		"pulsar://-b:6650",
		"pulsar://[broker]:6650",
		"pulsar://[10.0.0.1]:6650",
		"pulsar://b%30:6650",
		"pulsar://127.1:6650",
	} {
		if err := checkBrokerURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestExampleMatchesDefaults(t *testing.T) {
	got, err := Load(examplePath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Discovery.Static.Brokers) == 0 {
		t.Fatal("example lists no brokers")
	}
	want := withBrokers(got.Discovery.Static.Brokers...)
	want.Discovery.Static.WebBrokers = got.Discovery.Static.WebBrokers
	if !reflect.DeepEqual(got, want) {
		t.Errorf("example differs from defaults():\ngot  %+v\nwant %+v", got, want)
	}
}

// TestExampleDocumentsEveryKey keeps config.example.yaml from drifting: every
// key of Config must be in it with a comment, and every setting's comment
// must state the real default.
func TestExampleDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	type entry struct{ key, value *yaml.Node }
	entries := map[string]entry{}
	var collect func(n *yaml.Node, path string)
	collect = func(n *yaml.Node, path string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			entries[p] = entry{n.Content[i], n.Content[i+1]}
			collect(n.Content[i+1], p)
		}
	}
	collect(doc.Content[0], "")

	defaults := reflect.ValueOf(defaults()).Elem()
	walk(func(s setting) {
		e, ok := entries[s.path]
		if !ok {
			t.Errorf("%s: missing from %s", s.path, examplePath)
			return
		}
		comment := e.key.HeadComment + e.key.LineComment + e.value.LineComment
		if strings.TrimSpace(comment) == "" {
			t.Errorf("%s: no comment", s.path)
		}
		if s.env == "" || s.field.Type.Kind() == reflect.Slice {
			return // sections have no default; brokers has none to state
		}
		def := "Default: " + fieldByPath(defaults, s.path)
		says := regexp.MustCompile(regexp.QuoteMeta(def) + `(,|\s|$)`)
		if !says.MatchString(strings.Join(strings.Fields(comment), " ")) {
			t.Errorf("%s: comment does not say %q:\n%s", s.path, def, comment)
		}
	})
}

// fieldByPath formats the value at a yaml key path the way the example
// writes it.
func fieldByPath(v reflect.Value, path string) string {
	for _, name := range strings.Split(path, ".") {
		for i := range v.NumField() {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); tag == name {
				v = v.Field(i)
				break
			}
		}
	}
	if v.Kind() == reflect.String && v.String() == "" {
		return `""`
	}
	return fmt.Sprint(v.Interface())
}

// Environment names must follow from the yaml keys, so that documenting one
// documents the other.
func TestEnvNames(t *testing.T) {
	walk(func(s setting) {
		if s.env == "" {
			return
		}
		var want strings.Builder
		want.WriteString(envPrefix)
		path := []rune(s.path)
		for i, r := range path {
			// An acronym (pulsarTLS, clientCAFile) is one word: PULSAR_TLS, CLIENT_CA_FILE.
			// A plural's s stays with it (trustedCIDRs: TRUSTED_CIDRS).
			lowerAt := func(j int) bool { return j < len(path) && unicode.IsLower(path[j]) }
			inAcronym := i > 0 && unicode.IsUpper(path[i-1]) &&
				(!lowerAt(i+1) || path[i+1] == 's' && !lowerAt(i+2))
			switch {
			case r == '.':
				want.WriteRune('_')
			case unicode.IsUpper(r) && inAcronym:
				want.WriteRune(r)
			case unicode.IsUpper(r):
				want.WriteRune('_')
				want.WriteRune(r)
			default:
				want.WriteRune(unicode.ToUpper(r))
			}
		}
		if s.env != want.String() {
			t.Errorf("%s: env %s, want %s", s.path, s.env, want.String())
		}
	})
}

func ptr[T any](v T) *T { return &v }

// envCase is one configuration given as environment variables (beside a static broker) and
// the error it must give; "" = valid.
type envCase struct {
	env  []string
	want string
}

func checkEnvCases(t *testing.T, cases []envCase) {
	t.Helper()
	for _, tc := range cases {
		_, err := Load("", append([]string{"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar://b:6650"}, tc.env...))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: err = %v, want %q", tc.env, err, tc.want)
		}
	}
}

// Each broker.allowedHosts pattern is DNS labels that may hold * and ?: anything else is
// refused at load, naming the key, rather than matched in some surprising way.
func TestAllowedHostsValidation(t *testing.T) {
	const hosts = "PULSAR_PROXY_BROKER_ALLOWED_HOSTS="
	checkEnvCases(t, []envCase{
		{[]string{hosts + "*.broker.pulsar.svc.cluster.local"}, ""},
		{[]string{hosts + "pulsar-broker-*,broker-?.pulsar,10.0.0.*"}, ""},
		{[]string{hosts + "*.pulsar.svc.cluster.local."}, `broker.allowedHosts[0]: "*.pulsar.svc.cluster.local." is not a host pattern: empty label`},
		{[]string{hosts + "ok.example,a..b"}, `broker.allowedHosts[1]: "a..b" is not a host pattern`},
		{[]string{hosts + "*/x"}, `broker.allowedHosts[0]: "*/x" is not a host pattern: character '/'`},
		{[]string{hosts + "[a-z]*.pulsar"}, `broker.allowedHosts[0]: "[a-z]*.pulsar" is not a host pattern: character '['`},
		{[]string{hosts + `b\*.pulsar`}, `broker.allowedHosts[0]: "b\\*.pulsar" is not a host pattern: character '\\'`},
		{[]string{hosts + "broker_0.pulsar"}, `broker.allowedHosts[0]: "broker_0.pulsar" is not a host pattern`},
		{[]string{hosts + "-*.pulsar"}, `broker.allowedHosts[0]: "-*.pulsar" is not a host pattern`},
		{[]string{hosts + "*:6650"}, `broker.allowedHosts[0]: "*:6650" is not a host pattern`},
	})
}

func TestIPv6PrefixLength(t *testing.T) {
	const prefix = "PULSAR_PROXY_SESSION_IPV6_PREFIX_LENGTH="
	checkEnvCases(t, []envCase{
		{[]string{prefix + "32"}, ""},
		{[]string{prefix + "128"}, ""},
		{[]string{prefix + "31"}, "session.ipv6PrefixLength: must be between 32 and 128, got 31"},
		{[]string{prefix + "129"}, "session.ipv6PrefixLength: must be between 32 and 128, got 129"},
		{[]string{prefix + "/64"}, `environment: PULSAR_PROXY_SESSION_IPV6_PREFIX_LENGTH (session.ipv6PrefixLength): want a whole number, got "/64"`},
	})
	cfg, err := Load(writeFile(t, "session: {ipv6PrefixLength: 56}\n"), brokersEnv)
	if err != nil || cfg.Session.IPv6PrefixLength != 56 {
		t.Fatalf("yaml: %v, %v", cfg, err)
	}
	if defaults().Session.IPv6PrefixLength != 64 {
		t.Fatal("the default is not 64")
	}
}

func TestDescriptorReserve(t *testing.T) {
	const reserve = "PULSAR_PROXY_SESSION_DESCRIPTOR_RESERVE="
	checkEnvCases(t, []envCase{
		{[]string{reserve + "64"}, ""},
		{[]string{reserve + "63"}, "session.descriptorReserve: must be at least 64"},
		{[]string{reserve + "many"}, "environment: PULSAR_PROXY_SESSION_DESCRIPTOR_RESERVE (session.descriptorReserve): want a whole number"},
	})
	cfg, err := Load(writeFile(t, "session: {descriptorReserve: 4096}\n"), brokersEnv)
	if err != nil || cfg.Session.DescriptorReserve != 4096 {
		t.Fatalf("yaml: %v, %v", cfg, err)
	}
}

func TestAuthValidation(t *testing.T) {
	checkEnvCases(t, []envCase{
		{[]string{"PULSAR_PROXY_AUTH_ENABLED=true"}, "auth.token: auth.enabled needs"},
		{[]string{"PULSAR_PROXY_AUTHZ_ENABLED=true"}, "authz.policyFile: authz.enabled needs a policy file"},
		{[]string{"PULSAR_PROXY_AUTH_REFRESH_TIMEOUT=0s"}, "auth.refreshTimeout"},
		{[]string{"PULSAR_PROXY_AUTH_BROKER_CLIENT_TOKEN_FILE=/x"}, ""}, // alone it is fine
		// A policy file implies authz.enabled, which needs authentication.
		{[]string{"PULSAR_PROXY_AUTHZ_POLICY_FILE=/p.yaml"}, "authz.enabled: needs auth.enabled"},
		{[]string{"PULSAR_PROXY_AUTHZ_POLICY_FILE=/p.yaml", "PULSAR_PROXY_AUTHZ_ENABLED=false"}, ""},
		{[]string{"PULSAR_PROXY_AUTH_TOKEN_SECRET_KEY_FILE=/k.b64"}, ""},
		{[]string{"PULSAR_PROXY_AUTHZ_RELOAD_INTERVAL=-1s"}, "authz.reloadInterval"},
		{[]string{"PULSAR_PROXY_AUTH_FORWARD_CLIENT_CREDENTIALS=true"}, ""},
	})
	_, err := Load("", []string{"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar://b:6650", "PULSAR_PROXY_AUTHZ_ENABLED=true",
		"PULSAR_PROXY_AUTHZ_POLICY_FILE=/p.yaml", "PULSAR_PROXY_AUTH_BROKER_CLIENT_TOKEN=a", "PULSAR_PROXY_AUTH_BROKER_CLIENT_TOKEN_FILE=/t"})
	if err == nil || !strings.Contains(err.Error(), "authz.enabled: needs auth.enabled") || !strings.Contains(err.Error(), "not both") {
		t.Errorf("err = %v", err)
	}
}

func TestAdvertisedValidation(t *testing.T) {
	checkEnvCases(t, []envCase{
		{[]string{"PULSAR_PROXY_LISTEN_ADVERTISED_PULSAR=pulsar://gw.example:6650"}, ""},
		{[]string{"PULSAR_PROXY_LISTEN_ADVERTISED_HTTP=http://[::1]:8080/"}, ""},
		{[]string{"PULSAR_PROXY_LISTEN_ADVERTISED_PULSAR=pulsar+ssl://gw:6651"}, "listen.advertised.pulsar: \"pulsar+ssl://gw:6651\" is not pulsar://host:port"},
		{[]string{"PULSAR_PROXY_LISTEN_ADVERTISED_PULSAR=pulsar://gw"}, "is not pulsar://host:port"},
		{[]string{"PULSAR_PROXY_LISTEN_ADVERTISED_HTTP=http://u@gw:80"}, "is not http://host:port"},
		{[]string{"PULSAR_PROXY_LISTEN_ADVERTISED_PULSAR_TLS=pulsar+ssl://gw:6651"}, "listen.advertised.pulsarTLS: set, but its listener is off"},
		{[]string{"PULSAR_PROXY_LISTEN_ADVERTISED_HTTPS=https://gw:8443"}, "listen.advertised.https: set, but its listener is off"},
	})
}

func TestJWKSValidation(t *testing.T) {
	const (
		url     = "PULSAR_PROXY_AUTH_TOKEN_JWKS_URL="
		issuers = "PULSAR_PROXY_AUTH_TOKEN_ISSUERS="
		iss     = issuers + "https://idp.example.com/realms/pulsar"
	)
	checkEnvCases(t, []envCase{
		{[]string{"PULSAR_PROXY_AUTH_ENABLED=true", url + "https://idp.example.com/certs", iss}, ""},
		{[]string{url + "http://127.0.0.1:8080/jwks", iss}, ""},
		{[]string{url + "http://[::1]:8080/jwks", iss}, ""},
		{[]string{url + "http://localhost/jwks", iss}, ""},
		{[]string{issuers + "https://a,https://b"}, ""}, // issuers checked with a static key too
		{[]string{url + "http://idp.example.com/certs", iss}, `auth.token.jwksURL: "http://idp.example.com/certs": http is allowed to a loopback address only`},
		{[]string{url + "ftp://idp/certs", iss}, "auth.token.jwksURL: \"ftp://idp/certs\": want an https:// URL"},
		{[]string{url + "https://idp/certs"}, "auth.token.issuers: auth.token.jwksURL needs the provider's issuer"},
		{[]string{url + "https://idp/certs", iss, "PULSAR_PROXY_AUTH_TOKEN_PUBLIC_KEY_FILE=/k.pem"}, "auth.token.jwksURL: set jwksURL or a key file"},
		{[]string{url + "https://idp/certs", iss, "PULSAR_PROXY_AUTH_TOKEN_JWKS_MIN_REFETCH_INTERVAL=0s"}, "auth.token.jwksMinRefetchInterval: must be greater than 0"},
		{[]string{url + "https://idp/certs", iss, "PULSAR_PROXY_AUTH_TOKEN_JWKS_REFRESH_INTERVAL=-1s"}, "auth.token.jwksRefreshInterval: must be greater than 0"},
		{[]string{url + "https://idp/certs", iss, "PULSAR_PROXY_AUTH_TOKEN_JWKS_TIMEOUT=0s"}, "auth.token.jwksTimeout: must be greater than 0"},
		{[]string{"PULSAR_PROXY_AUTH_TOKEN_JWKS_CA_FILE=/ca.pem"}, "auth.token.jwksCAFile: only applies with auth.token.jwksURL"},
	})
	cfg, err := Load(writeFile(t, "auth:\n  token:\n    jwksURL: https://idp/certs\n    issuers: [https://idp/a, https://idp/b]\n"), brokersEnv)
	if err != nil || cfg.Auth.Token.JWKSURL != "https://idp/certs" || len(cfg.Auth.Token.Issuers) != 2 {
		t.Fatalf("yaml: %+v, %v", cfg.Auth.Token, err)
	}
}

func TestCertRoleValidation(t *testing.T) {
	const (
		from   = "PULSAR_PROXY_AUTH_TLS_ROLE_FROM="
		prefix = "PULSAR_PROXY_AUTH_TLS_URI_PREFIX="
	)
	checkEnvCases(t, []envCase{
		{[]string{from + "cn"}, ""},
		{[]string{from + "san-dns"}, ""},
		{[]string{from + "san-uri"}, ""},
		{[]string{from + "san-uri", prefix + "spiffe://cluster.local/ns/app/sa/"}, ""},
		{[]string{from + "CN"}, `auth.tls.roleFrom: "CN" is not one of cn|san-dns|san-uri`},
		{[]string{prefix + "spiffe://cluster.local/"}, `auth.tls.uriPrefix: only applies with auth.tls.roleFrom san-uri (roleFrom is "cn")`},
		{[]string{from + "san-uri", prefix + "cluster.local/ns/"}, `auth.tls.uriPrefix: "cluster.local/ns/" is not the start of a URI with its scheme`},
	})
	cfg, err := Load(writeFile(t, "auth:\n  tls:\n    roleFrom: san-uri\n    uriPrefix: spiffe://td/\n"), brokersEnv)
	if err != nil || cfg.Auth.ClientCert != (AuthTLS{RoleFrom: "san-uri", URIPrefix: "spiffe://td/"}) {
		t.Fatalf("yaml: %+v, %v", cfg, err)
	}
}

// TLS versions and CIDRs are parsed once, as the file or the environment is read: the
// configuration hands on crypto/tls's version numbers and netip prefixes.
func TestTypedValues(t *testing.T) {
	yamlCfg, err := Load(writeFile(t, `
tls: {minVersion: 1.3}
broker: {tls: {minVersion: "1.3"}}
proxyProtocol: {enabled: true, trustedCIDRs: [10.0.0.0/8, "fd00::/8"]}
`), brokersEnv)
	if err != nil {
		t.Fatal(err)
	}
	envCfg, err := Load("", append([]string{
		"PULSAR_PROXY_TLS_MIN_VERSION=1.3",
		"PULSAR_PROXY_BROKER_TLS_MIN_VERSION=1.3",
		"PULSAR_PROXY_PROXY_PROTOCOL_ENABLED=true",
		"PULSAR_PROXY_PROXY_PROTOCOL_TRUSTED_CIDRS=10.0.0.0/8,fd00::/8",
	}, brokersEnv...))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for name, cfg := range map[string]*Config{"yaml": yamlCfg, "env": envCfg} {
		if cfg.TLS.MinVersion != tls.VersionTLS13 || cfg.Broker.TLS.MinVersion != tls.VersionTLS13 {
			t.Errorf("%s: minVersion %v, broker %v", name, cfg.TLS.MinVersion, cfg.Broker.TLS.MinVersion)
		}
		if !slices.Equal(cfg.ProxyProtocol.TrustedCIDRs, want) {
			t.Errorf("%s: trustedCIDRs %v, want %v", name, cfg.ProxyProtocol.TrustedCIDRs, want)
		}
	}
	if d := defaults(); d.TLS.MinVersion != tls.VersionTLS12 || d.TLS.MinVersion.String() != "1.2" {
		t.Errorf("default tls.minVersion %v", d.TLS.MinVersion)
	}
	// A version built by hand (not read) outside the four is refused by validate.
	c := withBrokers("pulsar://b:6650")
	c.TLS.MinVersion = 0
	c.Broker.TLS.MinVersion = tls.VersionTLS11
	err = c.validate()
	if err == nil || !strings.Contains(err.Error(), `tls.minVersion: "" is not one of`) ||
		!strings.Contains(err.Error(), `broker.tls.minVersion: "1.1" is not one of 1.2|1.3`) {
		t.Errorf("validate: %v", err)
	}
}
