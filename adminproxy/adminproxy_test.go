package adminproxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// broker is a fake broker web service: it records what it got and answers as the test says.
type broker struct {
	*httptest.Server
	host   string // 127.0.0.1:port
	mu     sync.Mutex
	got    []got
	handle func(w http.ResponseWriter, r *http.Request, body []byte)
}

type got struct {
	method, path, uri, query string
	header                   http.Header
	host                     string
	bodySum                  string
	bodyLen                  int
}

func newBroker(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *broker {
	t.Helper()
	b := &broker{handle: handle}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(body)
		b.mu.Lock()
		b.got = append(b.got, got{r.Method, r.URL.Path, r.RequestURI, r.URL.RawQuery, r.Header.Clone(), r.Host, hex.EncodeToString(sum[:]), len(body)})
		b.mu.Unlock()
		if b.handle != nil {
			b.handle(w, r, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"served_by":%q,"len":%d}`, b.host, len(body))
	}))
	b.host = b.Listener.Addr().String()
	t.Cleanup(b.Close)
	return b
}

func (b *broker) requests() []got {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]got(nil), b.got...)
}

func (b *broker) url() string { return "http://" + b.host }

// redirectTo answers every request with a 307 to the same path on target (host:port).
func redirectTo(target string) func(w http.ResponseWriter, r *http.Request, body []byte) {
	return func(w http.ResponseWriter, r *http.Request, _ []byte) {
		u := *r.URL
		u.Scheme, u.Host = "http", target
		q := u.Query()
		q.Set("authoritative", "true")
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
	}
}

type testProxy struct {
	*httptest.Server
	p   *Proxy
	reg *promtest.Registry
	log *bytes.Buffer
}

func static(t *testing.T, urls ...string) *StaticUpstreams {
	t.Helper()
	s, err := NewStaticUpstreams(urls)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newProxy(t *testing.T, cfg Config) *testProxy {
	t.Helper()
	tp := &testProxy{reg: promtest.New(), log: &bytes.Buffer{}}
	var mu sync.Mutex
	cfg.Logger = zerolog.New(syncWriter{&mu, tp.log})
	cfg.Metrics = NewMetrics(tp.reg)
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = 16
	}
	if cfg.MaxBodySize == 0 {
		cfg.MaxBodySize = 64 << 20
	}
	if cfg.MaxRedirects == 0 {
		cfg.MaxRedirects = 4
	}
	for _, d := range []*time.Duration{&cfg.DialTimeout, &cfg.ResponseTimeout, &cfg.RequestTimeout, &cfg.ReadTimeout} {
		if *d == 0 {
			*d = 10 * time.Second
		}
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = t.TempDir()
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ops := http.NewServeMux()
	ops.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	tp.p = p
	tp.Server = httptest.NewUnstartedServer(p.Handler(ops))
	tp.Server.Config.ReadHeaderTimeout = cfg.ReadTimeout
	tp.Server.Start()
	t.Cleanup(func() { tp.Server.Close(); p.Close() })
	return tp
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (tp *testProxy) do(t *testing.T, method, path string, body io.Reader, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, tp.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := tp.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func reasonOf(t *testing.T, body string) string {
	t.Helper()
	var r struct{ Reason string }
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("answer %q is not Pulsar's error body: %v", body, err)
	}
	return r.Reason
}

func counter(t *testing.T, reg *promtest.Registry, name string, labels ...string) float64 {
	t.Helper()
	return reg.Value(t, name, labels...)
}

func TestRoutesAdminPathsAndLeavesTheRest(t *testing.T) {
	brk := newBroker(t, nil)
	wrk := newBroker(t, nil)
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), Workers: static(t, wrk.url())})
	if code, body, _ := tp.do(t, "GET", "/healthz", nil); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	for path, toWorker := range map[string]bool{
		"/admin/v2/tenants": false,
		"/admin/v2/persistent/public/default/t%20x/stats":   false,
		"/lookup/v2/topic/persistent/public/default/t":      false,
		"/admin/v3/functions/public/default/f/status":       true,
		"/admin/v3/sources/public/default/s":                true,
		"/admin/v3/sinks/public/default/s":                  true,
		"/admin/v2/functions/public/default/f":              true,
		"/admin/v2/worker/cluster":                          true,
		"/admin/v2/worker-stats/functionsmetrics":           true,
		"/admin/functions/public/default/f":                 true,
		"/admin/v3/packages/function/public/default/p/v1":   false,
		"/admin/namespaces/public/standalone/default/x?y=1": false,
	} {
		code, body, _ := tp.do(t, "GET", path, nil)
		want := brk.host
		if toWorker {
			want = wrk.host
		}
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s, want served by %s", path, code, body, want)
		}
	}
	// The raw path and query reach the broker as the client wrote them.
	for _, r := range brk.requests() {
		if r.path == "/admin/v2/persistent/public/default/t x/stats" && r.uri != "/admin/v2/persistent/public/default/t%20x/stats" {
			t.Errorf("request URI %q", r.uri)
		}
		if r.path == "/admin/namespaces/public/standalone/default/x" && r.uri != "/admin/namespaces/public/standalone/default/x?y=1" {
			t.Errorf("request URI %q", r.uri)
		}
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_requests_total", "route", "/admin/v2/persistent", "code", "200"); got != 1 {
		t.Errorf("requests_total{route=/admin/v2/persistent} = %v", got)
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_requests_total", "route", "/admin/v3/functions", "code", "200"); got != 1 {
		t.Errorf("requests_total{route=/admin/v3/functions} = %v", got)
	}
}

func TestClassifyLabelsAreBounded(t *testing.T) {
	for path, want := range map[string]string{
		"/admin/v2/persistent/a/b/c/stats":      "/admin/v2/persistent",
		"/admin/v2/whatever-a-client-invents/x": "/admin/v2/other",
		"/admin/v3/functions/a/b/c":             "/admin/v3/functions",
		"/admin/clusters":                       "/admin/clusters",
		"/admin/evil":                           "/admin/other",
		"/admin":                                "/admin/other",
		"/lookup/v2/topic/persistent/a/b/c":     "/lookup/v2",
		"/lookup/v9/x":                          "/lookup/other",
		"/admin/v2/tenants/":                    "/admin/v2/tenants",
	} {
		r, err := classify(path)
		if err != nil || r.label != want {
			t.Errorf("classify(%s) = %q, %v; want %q", path, r.label, err, want)
		}
		if !slices.Contains(routeLabels(), r.label) {
			t.Errorf("label %q is not among those made at start", r.label)
		}
	}
}

// A path a server could read as another one is refused before anything is sent: the decoded
// path is checked, so encoded dots and slashes do not get through either.
func TestRefusesPathTricks(t *testing.T) {
	brk := newBroker(t, nil)
	tp := newProxy(t, Config{Brokers: static(t, brk.url())})
	for _, raw := range []string{
		"/admin/v2/../../metrics",
		"/admin/v2/%2e%2e/%2e%2e/metrics",
		"/admin/v2/tenants/%2E%2E",
		"/admin/v2/persistent%2F..%2F..%2Fworker",
		"/admin/v2//tenants",
		"/admin/v2/./tenants",
		"/admin/v2/tenants%5C..",
		"/admin/v2/tenants/a%00b",
		"/lookup/v2/topic/%0d%0aX-Injected:%20yes",
	} {
		conn, err := net.Dial("tcp", tp.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n", raw)
		b, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 400") {
			t.Errorf("%s: %q", raw, firstLine(string(b)))
		}
	}
	if n := len(brk.requests()); n != 0 {
		t.Errorf("the broker got %d requests", n)
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\r\n"); return l }

// A broker's 307 to another broker of the live set is followed inside, with the body sent
// again whole, whether the first broker read the body before redirecting or not.
func TestFollowsRedirectsWithTheBody(t *testing.T) {
	owner := newBroker(t, nil)
	for _, readFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("readFirst=%v", readFirst), func(t *testing.T) {
			other := newBroker(t, nil)
			other.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if readFirst {
					io.Copy(io.Discard, r.Body)
				}
				redirectTo(owner.host)(w, r, nil)
			})
			tp := newProxy(t, Config{Brokers: static(t, other.url(), owner.url()), memBody: 64 << 10})
			tp.p.cfg.Brokers = pinned{static(t, other.url(), owner.url()), other.url()}
			body := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: most of it in the spool file
			sum := sha256.Sum256(body)
			code, resp, _ := tp.do(t, "POST", "/admin/v2/schemas/public/default/t/schema", bytes.NewReader(body), "Content-Type", "application/json")
			if code != 200 || !strings.Contains(resp, owner.host) {
				t.Fatalf("%d %s", code, resp)
			}
			reqs := owner.requests()
			last := reqs[len(reqs)-1]
			if last.bodyLen != len(body) || last.bodySum != hex.EncodeToString(sum[:]) || last.method != "POST" || last.query != "authoritative=true" {
				t.Errorf("owner got %s %d bytes (sum %s), query %q", last.method, last.bodyLen, last.bodySum, last.query)
			}
			if last.host != owner.host {
				t.Errorf("Host %q, want the owner's %s", last.host, owner.host)
			}
			if got := counter(t, tp.reg, "pulsar_proxy_http_redirects_followed_total"); got != 1 {
				t.Errorf("redirects_followed_total = %v", got)
			}
			if !strings.Contains(tp.log.String(), `"redirects":1`) || !strings.Contains(tp.log.String(), `"served_by":"`+owner.host+`"`) {
				t.Errorf("access log: %s", tp.log)
			}
		})
	}
}

// pinned puts one upstream first, so a test knows which broker a request reaches first.
type pinned struct {
	Upstreams
	first string
}

func (p pinned) WebURLs() []string {
	out := []string{p.first}
	for _, u := range p.Upstreams.WebURLs() {
		if u != p.first {
			out = append(out, u)
		}
	}
	return out
}

// A redirect to a host the set does not list is refused with 502 and never dialled.
func TestRefusesRedirectOutsideTheSet(t *testing.T) {
	decoy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := decoy.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	defer decoy.Close()
	brk := newBroker(t, redirectTo(decoy.Addr().String()))
	tp := newProxy(t, Config{Brokers: static(t, brk.url())})
	code, body, _ := tp.do(t, "PUT", "/admin/v2/brokers/decoy", strings.NewReader(`{"x":1}`))
	if code != http.StatusBadGateway || !strings.Contains(reasonOf(t, body), "not a broker web service this proxy knows") {
		t.Errorf("%d %s", code, body)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the decoy got %d connections", n)
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_upstream_errors_total", "reason", reasonRedirectRefused); got != 1 {
		t.Errorf("upstream_errors_total{redirect_refused} = %v", got)
	}
	if !strings.Contains(tp.log.String(), "refused a redirect") {
		t.Errorf("not logged: %s", tp.log)
	}
	// A credentials-bearing or port-less Location is refused the same way.
	for _, loc := range []string{"http://user:pw@" + brk.host + "/x", "http://127.0.0.1/x", "ftp://" + brk.host + "/x"} {
		brk.handle = func(w http.ResponseWriter, r *http.Request, _ []byte) {
			w.Header().Set("Location", loc)
			w.WriteHeader(http.StatusTemporaryRedirect)
		}
		if code, body, _ := tp.do(t, "GET", "/admin/v2/clusters", nil); code != http.StatusBadGateway {
			t.Errorf("Location %s: %d %s", loc, code, body)
		}
	}
}

func TestBoundsRedirects(t *testing.T) {
	var a, b *broker
	a = newBroker(t, func(w http.ResponseWriter, r *http.Request, body []byte) { redirectTo(b.host)(w, r, body) })
	b = newBroker(t, func(w http.ResponseWriter, r *http.Request, body []byte) { redirectTo(a.host)(w, r, body) })
	tp := newProxy(t, Config{Brokers: static(t, a.url(), b.url()), MaxRedirects: 3})
	code, body, _ := tp.do(t, "GET", "/admin/v2/persistent/a/b/c/stats", nil)
	if code != http.StatusBadGateway || !strings.Contains(reasonOf(t, body), "more than 3 redirects") {
		t.Errorf("%d %s", code, body)
	}
	if n := len(a.requests()) + len(b.requests()); n != 4 {
		t.Errorf("%d requests to brokers, want 4 (first + 3 redirects)", n)
	}
}

// A broker whose web service cannot be dialled is skipped; when none can be, 502 says why.
func TestSkipsUnreachableBrokers(t *testing.T) {
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	live := newBroker(t, nil)
	tp := newProxy(t, Config{Brokers: pinned{static(t, deadURL, live.url()), deadURL}})
	code, body, _ := tp.do(t, "POST", "/admin/v2/tenants/x", strings.NewReader(`{"adminRoles":[]}`))
	if code != 200 || !strings.Contains(body, live.host) {
		t.Errorf("%d %s", code, body)
	}
	if r := live.requests(); len(r) != 1 || r[0].bodyLen != len(`{"adminRoles":[]}`) {
		t.Errorf("live broker got %+v", r)
	}
	dead2, _ := net.Listen("tcp", "127.0.0.1:0")
	dead2URL := "http://" + dead2.Addr().String()
	dead2.Close()
	tp2 := newProxy(t, Config{Brokers: static(t, deadURL, dead2URL)})
	for range 2 { // the candidates' order rotates: the reason names both either way
		code, body, _ = tp2.do(t, "GET", "/admin/v2/clusters", nil)
		reason := reasonOf(t, body)
		if code != http.StatusBadGateway || !strings.Contains(reason, "no broker web service reachable (tried 2)") || !strings.Contains(body, "connection refused") ||
			!strings.Contains(reason, strings.TrimPrefix(deadURL, "http://")) || !strings.Contains(reason, strings.TrimPrefix(dead2URL, "http://")) {
			t.Errorf("%d %s", code, body)
		}
	}
	if got := counter(t, tp2.reg, "pulsar_proxy_http_upstream_errors_total", "reason", reasonUnreachable); got != 2 {
		t.Errorf("upstream_errors_total{unreachable} = %v", got)
	}
	tp3 := newProxy(t, Config{Brokers: static(t)})
	if code, body, _ := tp3.do(t, "GET", "/admin/v2/clusters", nil); code != http.StatusBadGateway || !strings.Contains(body, "no broker web service is known") {
		t.Errorf("no upstream: %d %s", code, body)
	}
}

// fakeAuth accepts "token" credentials whose data is "role:<name>".
type fakeAuth struct{ anonymous string }

func (a fakeAuth) Authenticate(c authn.Credentials) (authn.Identity, error) {
	switch {
	case c.Method == "" && a.anonymous != "":
		return authn.Identity{Role: a.anonymous, Method: "anonymous"}, nil
	case c.Method == "":
		return authn.Identity{}, &authn.Error{Method: "none", Reason: authn.ReasonNoCredentials, Detail: "this proxy requires credentials"}
	case c.Method != "token":
		return authn.Identity{}, &authn.Error{Method: c.Method, Reason: authn.ReasonUnknownMethod}
	}
	role, ok := strings.CutPrefix(string(c.Data), "role:")
	if !ok {
		return authn.Identity{}, &authn.Error{Method: "token", Reason: authn.ReasonBadSignature}
	}
	return authn.Identity{Role: role, Method: "token"}, nil
}

type failures struct{ n atomic.Int32 }

func (f *failures) AuthFailure(string, authn.Reason) { f.n.Add(1) }

func TestAuthenticatesAndNamesTheClientsRole(t *testing.T) {
	brk := newBroker(t, nil)
	proxyToken := func() (string, []byte, error) { return "token", []byte("proxy-token"), nil }
	fails := &failures{}
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), Auth: fakeAuth{}, AuthFailures: fails, ProxyCredentials: proxyToken})

	// No credentials, a bad token, another scheme: 401 from the proxy with the reason; the
	// broker never hears of them.
	for _, h := range [][]string{nil, {"Authorization", "Bearer garbage"}, {"Authorization", "Basic dTpw"}} {
		code, body, hdr := tp.do(t, "GET", "/admin/v2/tenants", nil, h...)
		if code != http.StatusUnauthorized || !strings.Contains(reasonOf(t, body), "authentication failed") || hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("%v: %d %s", h, code, body)
		}
	}
	if len(brk.requests()) != 0 || fails.n.Load() != 3 {
		t.Errorf("broker got %d requests; %d failures counted", len(brk.requests()), fails.n.Load())
	}

	// A client's own X-Original-Principal is replaced: the broker hears the proxy's token and
	// the authenticated role.
	code, body, _ := tp.do(t, "GET", "/admin/v2/tenants", nil, "Authorization", "Bearer role:bob", headerOriginalPrincipal, "admin",
		headerAuthMethod, "token", "X-Forwarded-For", "6.6.6.6")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	r := brk.requests()[0]
	if r.header.Get("Authorization") != "Bearer proxy-token" || r.header.Get(headerAuthMethod) != "token" ||
		r.header.Values(headerOriginalPrincipal)[0] != "bob" || len(r.header.Values(headerOriginalPrincipal)) != 1 {
		t.Errorf("broker got %v", r.header)
	}
	if xff := r.header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q: the client's own must not pass", xff)
	}
	if r.header.Get("X-Forwarded-Proto") != "http" || r.host != brk.host {
		t.Errorf("X-Forwarded-Proto %q, Host %q", r.header.Get("X-Forwarded-Proto"), r.host)
	}

	// forwardClientCredentials: the client's own token goes on.
	brk2 := newBroker(t, nil)
	tp2 := newProxy(t, Config{Brokers: static(t, brk2.url()), Auth: fakeAuth{}, ProxyCredentials: proxyToken, ForwardClientCredentials: true})
	tp2.do(t, "GET", "/admin/v2/tenants", nil, "Authorization", "Bearer role:alice", headerOriginalPrincipal, "admin")
	r = brk2.requests()[0]
	if r.header.Get("Authorization") != "Bearer role:alice" || r.header.Get(headerOriginalPrincipal) != "alice" {
		t.Errorf("forwarded: broker got %v", r.header)
	}
	// The access log names the principal.
	if !strings.Contains(tp.log.String(), `"principal":"bob"`) {
		t.Errorf("access log: %s", tp.log)
	}
}

// Without authentication the proxy is transparent, except that it never passes a client's
// X-Original-Principal.
func TestWithoutAuthPassesCredentialsButNotAPrincipal(t *testing.T) {
	brk := newBroker(t, nil)
	tp := newProxy(t, Config{Brokers: static(t, brk.url())})
	tp.do(t, "GET", "/admin/v2/tenants", nil, "Authorization", "Bearer client", headerOriginalPrincipal, "admin", "Connection", "X-Hop", "X-Hop", "1")
	r := brk.requests()[0]
	if r.header.Get("Authorization") != "Bearer client" || r.header.Get(headerOriginalPrincipal) != "" {
		t.Errorf("broker got %v", r.header)
	}
	if r.header.Get("X-Hop") != "" {
		t.Errorf("a hop-by-hop header named in Connection passed")
	}
}

func TestBodyLimit(t *testing.T) {
	brk := newBroker(t, nil)
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), MaxBodySize: 1 << 20})
	// Declared too large: refused before the broker hears of it.
	code, body, _ := tp.do(t, "POST", "/admin/v3/functions/a/b/f", bytes.NewReader(make([]byte, 2<<20)))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(reasonOf(t, body), "over the limit") {
		t.Errorf("%d %s", code, body)
	}
	// Chunked, found too large while streaming.
	code, body, _ = tp.do(t, "POST", "/admin/v3/functions/a/b/f", io.MultiReader(bytes.NewReader(make([]byte, 2<<20))))
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: %d %s", code, body)
	}
	for _, r := range brk.requests() {
		if r.bodyLen > 1<<20 {
			t.Errorf("the broker got %d bytes", r.bodyLen)
		}
	}
}

func TestConcurrencyLimit(t *testing.T) {
	release := make(chan struct{})
	var in atomic.Int32
	brk := newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		in.Add(1)
		<-release
		w.Write([]byte("{}"))
	})
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), MaxConcurrent: 2})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); tp.do(t, "GET", "/admin/v2/clusters", nil) }()
	}
	if !wait.Within(10*time.Second, func() bool { return in.Load() >= 2 }) {
		close(release) // lets the requests that did arrive go, so the test ends
		t.Fatal("waited 10s for two requests held at the broker; it did not happen")
	}
	code, body, hdr := tp.do(t, "GET", "/admin/v2/clusters", nil)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(reasonOf(t, body), "more than 2") {
		t.Errorf("%d %s", code, body)
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_requests_in_flight"); got != 2 {
		t.Errorf("in flight %v", got)
	}
	close(release)
	wg.Wait()
	if got := counter(t, tp.reg, "pulsar_proxy_http_requests_total", "route", "/admin/v2/clusters", "code", "429"); got != 1 {
		t.Errorf("429s counted: %v", got)
	}
}

// A client that stops sending its body is cut off after readTimeout; one that never finishes
// its headers is closed by the server's header timeout.
func TestSlowClients(t *testing.T) {
	brk := newBroker(t, nil)
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), ReadTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", tp.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := time.Now()
	fmt.Fprintf(conn, "POST /admin/v2/tenants/x HTTP/1.1\r\nHost: p\r\nContent-Length: 1000\r\n\r\n{\"adminRoles\"")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	if took := time.Since(began); took > 3*time.Second || !strings.HasPrefix(string(b), "HTTP/1.1 408") {
		t.Errorf("stalled body: %q (%v) after %s\n%s", firstLine(string(b)), err, took, tp.log)
	}
	conn2, err := net.Dial("tcp", tp.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	began = time.Now()
	fmt.Fprintf(conn2, "GET /admin/v2/tenants HTTP/1.1\r\nHost: p\r\n")
	conn2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(conn2); err != nil || time.Since(began) > 3*time.Second {
		t.Errorf("slow headers: connection not closed by the server (%v after %s)", err, time.Since(began))
	}
}

// A multi-megabyte upload streams through a bounded buffer: the proxy allocates a small,
// fixed amount however large the body (the part beyond 256 KiB is kept in a file, not memory).
func TestLargeUploadStaysBounded(t *testing.T) {
	brk := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.CopyBuffer(io.Discard, r.Body, make([]byte, 32<<10))
		fmt.Fprintf(w, `{"len":%d}`, n)
	}))
	defer brk.Close()
	tp := newProxy(t, Config{Brokers: static(t, brk.URL), MaxBodySize: 128 << 20})
	upload := func(n int) uint64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		code, body, _ := tp.do(t, "POST", "/admin/v3/functions/a/b/f", io.LimitReader(zeros{}, int64(n)), "Content-Type", "application/octet-stream")
		runtime.ReadMemStats(&after)
		if code != 200 || body != fmt.Sprintf(`{"len":%d}`, n) {
			t.Fatalf("%d %s", code, body)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	upload(1 << 20) // warm up pools and connections
	small, large := upload(4<<20), upload(64<<20)
	// Client, proxy and fake broker share the process: all three are counted.
	t.Logf("allocated: %d KiB for 4 MiB, %d KiB for 64 MiB", small>>10, large>>10)
	if large > 8<<20 || large > 3*small+2<<20 {
		t.Errorf("a 64 MiB upload allocated %d KiB (4 MiB: %d KiB): the body is being buffered", large>>10, small>>10)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestBrokerTimeouts(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	slow := newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	tp := newProxy(t, Config{Brokers: static(t, slow.url()), ResponseTimeout: 200 * time.Millisecond})
	code, body, _ := tp.do(t, "GET", "/admin/v2/clusters", nil)
	if code != http.StatusGatewayTimeout || !strings.Contains(reasonOf(t, body), "admin.responseTimeout") {
		t.Errorf("response timeout: %d %s", code, body)
	}
	tp2 := newProxy(t, Config{Brokers: static(t, slow.url()), RequestTimeout: 200 * time.Millisecond})
	code, body, _ = tp2.do(t, "GET", "/admin/v2/clusters", nil)
	if code != http.StatusGatewayTimeout || !strings.Contains(reasonOf(t, body), "admin.requestTimeout") {
		t.Errorf("request timeout: %d %s", code, body)
	}
	if got := counter(t, tp2.reg, "pulsar_proxy_http_upstream_errors_total", "reason", reasonTimeout); got != 1 {
		t.Errorf("upstream_errors_total{timeout} = %v", got)
	}
	// A broker that hangs up mid-answer: 502.
	hangup := newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		c, _, _ := http.NewResponseController(w).Hijack()
		c.Close()
	})
	tp3 := newProxy(t, Config{Brokers: static(t, hangup.url())})
	if code, body, _ := tp3.do(t, "GET", "/admin/v2/clusters", nil); code != http.StatusBadGateway || !strings.Contains(body, "broker request failed") {
		t.Errorf("hang-up: %d %s", code, body)
	}
}
