package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// fqName reads a descriptor's metric name (prometheus.Desc keeps it unexported).
var fqName = regexp.MustCompile(`^Desc\{fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)"`)

// registered names every metric family a registry has a collector for, series or not.
func registered(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	go func() { reg.Describe(ch); close(ch) }()
	seen := map[string]bool{}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the descriptor %s", d)
		}
		seen[m[1]] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestEveryFamilyHasSeriesAtStart: a fresh proxy with every part that exports metrics on
// (static discovery, TLS listener, tokens from a key set, Basic credentials, the policy, the
// admin API, the WebSocket API, multiplexing) exports a series of every family it registers before any client came, so
// that a dashboard panel shows 0 rather than "No data" and an alert's rate() sees the first
// event. Families with a broker label have their brokers' series once discovery lists them.
func TestEveryFamilyHasSeriesAtStart(t *testing.T) {
	broker := startBroker(t)
	dir := t.TempDir()
	server := certs.NewCA(t, dir, "metrics").Server(t, "proxy", time.Now().Add(time.Hour))
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"keys":[]}`))
	}))
	defer jwks.Close()
	policy := filepath.Join(dir, "policy.yaml")
	basic := filepath.Join(dir, "basic.conf")
	writeFile(t, basic, "alice:$apr1$8DXXXVmK$dQp0kQdlfQKN0GTGJQOsU0\n")
	writeFile(t, policy, "rules:\n  - roles: [alice]\n    resources: [\"public/default/*\"]\n    actions: [lookup]\n")
	cfgPath := filepath.Join(dir, "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`listen: {pulsar: "127.0.0.1:0", pulsarTLS: "127.0.0.1:0", http: "127.0.0.1:0"}
tls: {certFile: %q, keyFile: %q}
discovery:
  healthCheckInterval: 100ms
  static: {brokers: ["pulsar://%s"], webBrokers: ["http://127.0.0.1:8080"]}
broker: {allowedPorts: [%s], allowedWebPorts: [8080], multiplex: true}
session: {drainTimeout: 2s, passthrough: false}
auth: {enabled: true, token: {jwksURL: %q, issuers: ["https://idp.example"], audience: pulsar}, basic: {credentialsFile: %q}}
authz: {enabled: true, policyFile: %q}
admin: {enabled: true}
websocket: {enabled: true}
`, server.CertFile, server.KeyFile, broker.Addr, portOf(broker.Addr), jwks.URL, basic, policy))
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, addrs := run(t, cfg, &logBuffer{}, nil)
	wait.Until(t, 10*time.Second, "the proxy to be ready", func() bool {
		code, _ := get(t, "http://"+addrs.HTTP+"/readyz")
		return code == 200
	})
	var missing []string
	wait.Within(5*time.Second, func() bool {
		missing = withoutSeries(t, p.reg)
		return len(missing) == 0
	})
	if len(missing) > 0 {
		t.Errorf("families registered without a series on a fresh proxy: %v", missing)
	}
	if n := len(registered(t, p.reg)); n < 60 {
		t.Errorf("only %d families registered: is every part on?", n)
	}
}

// withoutSeries lists the registered families that Gather returns no series of.
func withoutSeries(t *testing.T, reg *prometheus.Registry) []string {
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, f := range families {
		if len(f.GetMetric()) > 0 {
			has[f.GetName()] = true
		}
	}
	var missing []string
	for _, name := range registered(t, reg) {
		if !has[name] {
			missing = append(missing, name)
		}
	}
	return missing
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
