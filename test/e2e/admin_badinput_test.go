package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// adminReason is the reason of a Pulsar-style error answer, {"reason": ...}.
func adminReason(t *testing.T, body string) string {
	t.Helper()
	var r struct{ Reason string }
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("answer %q is not Pulsar's error body: %v", body, err)
	}
	return r.Reason
}

func httpDo(t *testing.T, method, url string, body io.Reader, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rawHTTP writes request bytes on a new connection to addr and returns everything the proxy
// sends back until it closes the connection (at most wait), and how long that took.
func rawHTTP(t *testing.T, addr, request string, wait time.Duration) (string, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := time.Now()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(wait))
	b, _ := io.ReadAll(conn)
	return string(b), time.Since(began)
}

func statusLine(resp string) string { l, _, _ := strings.Cut(resp, "\r\n"); return l }

// TestAdminBadInput: what a client must not be able to do through the admin proxy, against the
// real brokers.
func TestAdminBadInput(t *testing.T) {
	p := startAdminProxy(t, "admin:\n  maxRequestBodySize: 65536\n  readTimeout: 1s\n")
	addr := strings.TrimPrefix(p.HTTPURL, "http://")

	t.Run("oversized body", func(t *testing.T) {
		code, body := httpDo(t, "POST", p.HTTPURL+"/admin/v2/schemas/public/default/big/schema", strings.NewReader(strings.Repeat("x", 100<<10)),
			"Content-Type", "application/json")
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(adminReason(t, body), "over the limit of 65536") {
			t.Errorf("%d %s", code, body)
		}
		// Sent chunked, the body is cut off at the limit while it streams: the client is
		// answered 413, or the broker's own 400 when it refused the part it read before the
		// limit was reached (its parser stops at the first bad token), or 502 when the broker
		// closed the connection while the proxy was still writing that part; either way no
		// more than the limit reached the broker.
		code, body = httpDo(t, "POST", p.HTTPURL+"/admin/v2/schemas/public/default/big/schema", io.MultiReader(strings.NewReader(strings.Repeat("x", 100<<10))),
			"Content-Type", "application/json")
		brokerClosed := code == http.StatusBadGateway && strings.Contains(adminReason(t, body), "broker request failed: write")
		if code != http.StatusRequestEntityTooLarge && code != http.StatusBadRequest && !brokerClosed {
			t.Errorf("chunked: %d %s", code, body)
		}
		for _, l := range waitAccessLog(t, p.Proc, 2) {
			if l.BytesIn > 65536 {
				t.Errorf("%s %s: %d bytes of the body forwarded, over the limit of 65536", l.Method, l.Path, l.BytesIn)
			}
		}
	})

	t.Run("slow loris", func(t *testing.T) {
		// Headers that never end: the server closes the connection after readTimeout.
		resp, took := rawHTTP(t, addr, "GET /admin/v2/clusters HTTP/1.1\r\nHost: proxy\r\nX-Slow: ", 10*time.Second)
		if took > 5*time.Second || strings.Contains(resp, "200 OK") {
			t.Errorf("unfinished headers: %q after %s", statusLine(resp), took)
		}
		t.Logf("unfinished headers: closed after %s", took.Round(time.Millisecond))
		// A body that stops arriving: 408 and the connection closed.
		resp, took = rawHTTP(t, addr, "PUT /admin/v2/tenants/slow HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"adminRoles\":", 10*time.Second)
		if took > 5*time.Second || !strings.HasPrefix(resp, "HTTP/1.1 408") {
			t.Errorf("stalled body: %q after %s", statusLine(resp), took)
		}
		t.Logf("stalled body: %q after %s", statusLine(resp), took.Round(time.Millisecond))
	})

	t.Run("path tricks", func(t *testing.T) {
		before := p.count(t, "pulsar_proxy_http_requests_total", `route="/invalid"`, `code="400"`)
		tricks := []string{
			"/admin/v2/../../metrics",
			"/admin/v2/%2e%2e/%2e%2e/metrics",
			"/admin/v2/persistent/public/default/%2E%2E/%2E%2E/%2E%2E/brokers",
			"/admin/v2/persistent%2F..%2F..%2Fworker/cluster",
			"/admin/v2//tenants",
			"/admin/v2/./tenants",
			"/admin/v2/tenants/a%5C..%5C",
			"/lookup/v2/topic/persistent/public/default/a%00b",
		}
		for _, path := range tricks {
			resp, _ := rawHTTP(t, addr, "GET "+path+" HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n", 5*time.Second)
			if !strings.HasPrefix(resp, "HTTP/1.1 400") || !strings.Contains(resp, "canonical form") {
				t.Errorf("%s: %q", path, statusLine(resp))
			}
		}
		if n := p.count(t, "pulsar_proxy_http_requests_total", `route="/invalid"`, `code="400"`) - before; n != float64(len(tricks)) {
			t.Errorf("%v refused, want %d", n, len(tricks))
		}
		for _, l := range accessLog(t, p.Proc) {
			if l.Route == "/invalid" && l.Broker != "" {
				t.Errorf("a refused path reached broker %s: %+v", l.Broker, l)
			}
		}
	})
}

// TestAdminConcurrencyLimit: more admin requests at once than admin.maxConcurrentRequests
// get 429 while the others are served.
func TestAdminConcurrencyLimit(t *testing.T) {
	// Both held requests come from one address: the per-principal bound (a quarter of
	// the overall one by default) is raised to the overall one, which is what this tests.
	p := startAdminProxy(t, "admin:\n  maxConcurrentRequests: 2\n  maxConcurrentRequestsPerPrincipal: 2\n  readTimeout: 20s\n")
	addr := strings.TrimPrefix(p.HTTPURL, "http://")
	// Two uploads whose bodies arrive slowly hold both slots (they reach a broker, which
	// waits for the rest of the body).
	var wg sync.WaitGroup
	release := make(chan struct{})
	conns := make([]net.Conn, 2)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		fmt.Fprintf(c, "PUT /admin/v2/tenants/held-%d HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			c.Close()
		}()
	}
	defer func() { close(release); wg.Wait() }()
	wait.Until(t, 10*time.Second, "the held requests to get in", func() bool {
		return p.metric(t, "pulsar_proxy_http_requests_in_flight") >= 2
	})
	for range 3 {
		code, body := httpDo(t, "GET", p.HTTPURL+"/admin/v2/clusters", nil)
		if code != http.StatusTooManyRequests || !strings.Contains(adminReason(t, body), "more than 2 admin requests at once") {
			t.Errorf("%d %s", code, body)
		}
	}
	// /healthz, /readyz and /metrics are not admin requests and stay available.
	if code, _ := p.get("/healthz"); code != 200 {
		t.Errorf("/healthz %d while the admin API is full", code)
	}
}

// closedPortURL is http://127.0.0.1:<a port nothing listens on>.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// TestAdminBrokerWebServiceDown: a broker whose web service does not answer is skipped for
// the other; when no broker's web service answers, the client gets 502 with the reason, and
// /readyz (which follows the brokers' binary ports) is unaffected.
func TestAdminBrokerWebServiceDown(t *testing.T) {
	dead1, dead2 := closedPortURL(t), closedPortURL(t)
	p := startAdminProxyWeb(t, []string{dead1, theRig.BrokerHTTP(2)}, "")
	for range 4 {
		if code, body := httpDo(t, "GET", p.HTTPURL+"/admin/v2/clusters", nil); code != 200 || !strings.Contains(body, theRig.Cluster) {
			t.Errorf("with broker 1's web service down: %d %s", code, body)
		}
	}
	p2 := startAdminProxyWeb(t, []string{dead1, dead2}, "")
	waitReady(t, p2)
	code, body := httpDo(t, "GET", p2.HTTPURL+"/admin/v2/clusters", nil)
	reason := adminReason(t, body)
	if code != http.StatusBadGateway || !strings.Contains(reason, "no broker web service reachable") || !strings.Contains(reason, "connection refused") ||
		!strings.Contains(reason, hostOf(dead1)) {
		t.Errorf("every web service down: %d %s", code, body)
	}
	if code, body := p2.get("/readyz"); code != 200 {
		t.Errorf("/readyz %d %s while the brokers' binary ports answer", code, body)
	}
	if n := p2.count(t, "pulsar_proxy_http_upstream_errors_total", `reason="unreachable"`); n != 1 {
		t.Errorf("upstream_errors_total{reason=unreachable} = %v", n)
	}
}

// waitReady waits until the proxy's /readyz says ok.
func waitReady(t *testing.T, p *proxy) {
	t.Helper()
	var code int
	var body string
	if !wait.Within(30*time.Second, func() bool {
		code, body = p.get("/readyz")
		return code == 200
	}) {
		t.Fatalf("/readyz: %d %s", code, body)
	}
}
