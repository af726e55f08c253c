package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

// The dashboard and the alert rules the chart ships.
var (
	dashboardFile = filepath.Join("helm", "pulsar-proxy", "files", "pulsar-proxy-dashboard.json")
	rulesFile     = filepath.Join("helm", "pulsar-proxy", "files", "pulsar-proxy-alerts.yaml")
)

// TestDashboardAndAlertsMatchTheProxy runs the proxy with every part that exports metrics on
// (Consul discovery, a TLS listener, tokens from an identity provider's key set, the proxy's
// policy), drives real clients through it (lookups, produce and consume over plaintext and TLS,
// a refused token, a denied producer, a forged CONNECT, a broken TLS handshake, then a drain),
// records /metrics every second, and holds the dashboard's and the alert rules' queries to
// what it exported (tools/observability/cmd/obscheck: Prometheus's PromQL parser). It then
// draws the dashboard's panels from the recording (cmd/dashpng); with
// PULSAR_PROXY_DASHBOARD_PNG set (make dashboard-screenshot) the picture is written there.
func TestDashboardAndAlertsMatchTheProxy(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "dashboard")
	server := ca.Server(t, "proxy", time.Now().Add(20*time.Hour))
	idp := newKeySet(t)
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`rules:
  - roles: [alice]
    resources: ["public/default/*"]
    actions: [lookup, produce, consume]
  - roles: [bob]
    resources: ["public/default/*"]
    actions: [lookup]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	service := rigServiceName(t)
	registerBothBrokers(t, service)
	p := startProxy(t, nil, fmt.Sprintf(`tls:
  certFile: %q
  keyFile: %q
discovery:
  healthCheckInterval: 500ms
  consul:
    service: %q
    address: %q
broker:
  allowedPorts: [%s]
auth:
  enabled: true
  token:
    jwksURL: %q
    issuers: [%q]
    audience: pulsar
authz:
  enabled: true
  policyFile: %q
session:
  drainTimeout: 10s
log:
  level: info
`, server.CertFile, server.KeyFile, service, theRig.ConsulAddr, rigPorts(), idp.url, idp.issuer, policy))

	// A fresh proxy, no client yet: every metric the dashboard and the rules name must be
	// there already, and every panel must have data (obscheck -fresh).
	p.waitReady(t)
	freshRec := startRecording(p.HTTPURL+"/metrics", time.Second)
	time.Sleep(6 * time.Second)
	fresh := writeRecording(t, filepath.Join(dir, "fresh.jsonl"), freshRec.stop())

	rec := startRecording(p.HTTPURL+"/metrics", time.Second)

	// Clients: alice over plaintext and TLS, two topics, produce and consume.
	alice := pulsar.NewAuthenticationToken(idp.token(t, "alice", idp.key))
	plain := newClientWith(t, pulsar.ClientOptions{URL: p.PulsarURL, Authentication: alice})
	topic := uniqueTopic(t, "dashboard")
	consumer := subscribe(t, plain, topic, "dashboard", pulsar.Shared)
	for round := range 8 {
		consumeAll(t, consumer, produce(t, plain, topic, 150))
		secure := newClientWith(t, pulsar.ClientOptions{URL: p.PulsarTLSURL, TLSTrustCertsFilePath: ca.CertFile,
			TLSValidateHostname: true, Authentication: alice})
		produce(t, secure, uniqueTopic(t, fmt.Sprintf("dashboard-tls-%d", round)), 50)
		adminGet(t, p.HTTPURL+"/admin/v2/clusters", idp.token(t, "alice", idp.key)) // the admin API's panels
		adminGet(t, p.HTTPURL+"/admin/v2/clusters", "")                             // 401 from the proxy
		time.Sleep(3 * time.Second)
	}
	// bob may look topics up but not produce: the proxy refuses his producer.
	bob := newClientWith(t, pulsar.ClientOptions{URL: p.PulsarURL, Authentication: pulsar.NewAuthenticationToken(idp.token(t, "bob", idp.key))})
	if _, err := bob.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
		t.Fatal("bob's producer was allowed")
	}
	// A token signed by another key, and a CONNECT that forges a proxy-only field.
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		resp, _ := rawConnect(t, p.Addr, func(c *pb.CommandConnect) {
			c.AuthMethodName, c.AuthData = proto.String("token"), []byte(idp.token(t, "mallory", other))
		})
		if resp.GetType() != pb.BaseCommand_ERROR {
			t.Fatalf("a badly signed token got %v", resp.GetType())
		}
		rawConnect(t, p.Addr, func(c *pb.CommandConnect) { c.OriginalPrincipal = proto.String("admin") })
		// A TLS client that sends no TLS.
		if c, err := net.Dial("tcp", p.TLSAddr); err == nil {
			c.Write([]byte("not a TLS hello\r\n\r\n"))
			io.Copy(io.Discard, c)
			c.Close()
		}
		time.Sleep(time.Second)
	}
	time.Sleep(5 * time.Second)

	// The drain, with a consumer still connected: scraped faster while it lasts.
	rec.every(200 * time.Millisecond)
	if !p.Stop() {
		t.Error("the proxy did not stop on SIGTERM")
	}
	scrapes := rec.stop()
	if len(scrapes) < 30 {
		t.Fatalf("only %d scrapes recorded", len(scrapes))
	}
	recording := writeRecording(t, filepath.Join(dir, "metrics.jsonl"), scrapes)

	root := proxyproc.RepoRoot()
	dashboard, rules := filepath.Join(root, dashboardFile), filepath.Join(root, rulesFile)
	out, err := goRun(t, "./cmd/obscheck", "-recording", recording, "-dashboard", dashboard, "-rules", rules, "-fresh", fresh)
	t.Logf("obscheck:\n%s", out)
	if err != nil {
		t.Fatalf("the dashboard or the alert rules name what the proxy does not export: %v", err)
	}

	png := filepath.Join(dir, "dashboard.png")
	if dest := os.Getenv("PULSAR_PROXY_DASHBOARD_PNG"); dest != "" {
		png = dest
	}
	out, err = goRun(t, "./cmd/dashpng", "-recording", recording, "-dashboard", dashboard, "-out", png)
	t.Logf("dashpng:\n%s", out)
	if err != nil {
		t.Fatalf("drawing the dashboard from the recording: %v", err)
	}
}

// writeRecording writes scrapes to path, one JSON object a line, as obscheck reads them.
func writeRecording(t *testing.T, path string, scrapes []scrape) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	for _, s := range scrapes {
		enc.Encode(s)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// goRun runs a command of tools/observability (its own module) with go run.
func goRun(t *testing.T, pkg string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"run", pkg}, args...)...)
	cmd.Dir = filepath.Join(proxyproc.RepoRoot(), "tools", "observability")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// scrape is one /metrics body, as tools/observability reads a recording.
type scrape struct {
	Time    time.Time `json:"time"`
	Metrics string    `json:"metrics"`
}

// recorder fetches a /metrics URL at an interval until stopped (or until it stops answering
// after having answered: the proxy exited).
type recorder struct {
	mu       sync.Mutex
	scrapes  []scrape
	interval chan time.Duration
	done     chan struct{}
	stopped  chan struct{}
}

func startRecording(url string, interval time.Duration) *recorder {
	r := &recorder{interval: make(chan time.Duration, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	client := http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(r.stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			resp, err := client.Get(url)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					r.mu.Lock()
					r.scrapes = append(r.scrapes, scrape{Time: time.Now(), Metrics: string(b)})
					r.mu.Unlock()
				}
			}
			select {
			case <-r.done:
				return
			case d := <-r.interval:
				tick.Reset(d)
			case <-tick.C:
			}
		}
	}()
	return r
}

func (r *recorder) every(d time.Duration) { r.interval <- d }

func (r *recorder) stop() []scrape {
	close(r.done)
	<-r.stopped
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scrapes
}

// keySet is an identity provider as the proxy sees one: a JWKS endpoint on loopback with one
// RSA key, and tokens it signs.
type keySet struct {
	key    *rsa.PrivateKey
	url    string
	issuer string
}

func newKeySet(t *testing.T) *keySet {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	body, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
	}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return &keySet{key: key, url: srv.URL + "/jwks", issuer: "https://idp.example/realms/pulsar"}
}

// token is a token for sub signed with key under the key set's kid.
func (k *keySet) token(t *testing.T, sub string, key *rsa.PrivateKey) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"sub": sub, "iss": k.issuer, "aud": "pulsar", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// adminGet sends one admin API request through the proxy (with token when not ""); what it
// answers is for the metrics, not checked here.
func adminGet(t *testing.T, url, token string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
