package adminproxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/prereq"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// trickler sends a request body one byte at a time, as slowly as the test says, until the
// proxy answers or the test ends.
type trickler struct {
	status   chan string // the proxy's status line, once
	answered atomic.Bool
}

// startTrickle opens a connection to tp and starts a 100,000-byte POST as role (token
// role:<role>), then sends one byte of its body every pause.
func startTrickle(t *testing.T, tp *testProxy, role string, pause time.Duration) *trickler {
	t.Helper()
	c, err := net.Dial("tcp", tp.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /admin/v2/schemas/public/default/t/schema HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer role:%s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", role)
	tr := &trickler{status: make(chan string, 1)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(pause)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		line, _ := bufio.NewReader(c).ReadString('\n')
		tr.answered.Store(line != "")
		tr.status <- strings.TrimSpace(line)
	}()
	t.Cleanup(func() { close(stop); c.Close(); wg.Wait() })
	return tr
}

// Finding: bodies trickled at a byte per pause never met admin.readTimeout (its deadline was
// reset on every read) and held the global slots, taken before authentication, so every
// other client got 429. Now a body below admin.minBodyRate after its grace is cut with 408,
// and one principal holds at most its own slots: another principal is served meanwhile.
func TestTrickledBodiesAreCutAndDoNotStarveOthers(t *testing.T) {
	const trickles = 4
	brk := newBroker(t, nil)
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), Auth: fakeAuth{}, MaxConcurrent: trickles,
		MaxConcurrentPerPrincipal: 2, MinBodyRate: 1000, MinBodyRateGrace: 300 * time.Millisecond})
	var trs []*trickler
	for range trickles {
		trs = append(trs, startTrickle(t, tp, "mallory", 20*time.Millisecond))
	}
	wait.Until(t, 10*time.Second, "every trickled request to be admitted or refused", func() bool {
		n := int(counter(t, tp.reg, "pulsar_proxy_http_requests_in_flight"))
		for _, tr := range trs {
			if tr.answered.Load() {
				n++
			}
		}
		return n == trickles
	})
	if code, body, _ := tp.do(t, "GET", "/admin/v2/clusters", nil, "Authorization", "Bearer role:alice"); code != http.StatusOK {
		t.Fatalf("another principal during the trickles: %d %s", code, body)
	}
	for i, tr := range trs {
		select {
		case got := <-tr.status:
			if got != "HTTP/1.1 408 Request Timeout" && got != "HTTP/1.1 429 Too Many Requests" {
				t.Errorf("trickle %d: %q, want 408 (below admin.minBodyRate) or 429 (over the principal's slots)", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("trickle %d: still not cut off after 10 s", i)
		}
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_requests_rejected_total", "reason", rejectBodyRate); got != 2 {
		t.Errorf("rejected{body_rate} = %v, want 2", got)
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_requests_rejected_total", "reason", rejectPrincipal); got != 2 {
		t.Errorf("rejected{concurrency_per_principal} = %v, want 2", got)
	}
	if !strings.Contains(tp.log.String(), "admin.minBodyRate") {
		t.Errorf("the access log does not say why: %s", tp.log)
	}
}

// slowAuth is fakeAuth, except that a token "slow" waits until release is closed: an
// authentication stuck on the identity provider (a JWKS fetch for an unknown kid).
type slowAuth struct {
	fakeAuth
	waiting atomic.Int32
	release chan struct{}
}

func (a *slowAuth) Authenticate(c authn.Credentials) (authn.Identity, error) {
	if string(c.Data) == "slow" {
		a.waiting.Add(1)
		<-a.release
		return authn.Identity{}, &authn.Error{Method: "token", Reason: authn.ReasonUnknownKey}
	}
	return a.fakeAuth.Authenticate(c)
}

// A request waiting on authentication holds no slot: with every slot's worth of requests
// stuck there, a client whose credentials check at once is served.
func TestAuthenticationHoldsNoSlot(t *testing.T) {
	brk := newBroker(t, nil)
	auth := &slowAuth{release: make(chan struct{})}
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), Auth: auth, MaxConcurrent: 2})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(auth.release)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); tp.do(t, "GET", "/admin/v2/clusters", nil, "Authorization", "Bearer slow") }()
	}
	wait.Until(t, 10*time.Second, "four requests waiting on authentication", func() bool { return auth.waiting.Load() == 4 })
	if code, body, _ := tp.do(t, "GET", "/admin/v2/clusters", nil, "Authorization", "Bearer role:alice"); code != http.StatusOK {
		t.Fatalf("with four requests waiting on authentication: %d %s", code, body)
	}
}

// clientFrom is an HTTP client whose connections come from the loopback address src; it skips
// the test where the system cannot bind src (only Linux routes all of 127/8 to loopback).
func clientFrom(t *testing.T, src string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	probe, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(src)})
	prereq.Need(t, "a listener on "+src, err)
	probe.Close()
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// getAs GETs path from tp as who: "role:<name>" (a token of that role) or "addr:<ip>" (from
// that loopback address, without credentials).
func getAs(t *testing.T, tp *testProxy, who, path string) (int, string, http.Header) {
	t.Helper()
	kind, name, _ := strings.Cut(who, ":")
	req, _ := http.NewRequest("GET", tp.URL+path, nil)
	client := tp.Client()
	if kind == "role" {
		req.Header.Set("Authorization", "Bearer role:"+name)
	} else {
		client = clientFrom(t, name)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b := new(strings.Builder)
	bufio.NewReader(resp.Body).WriteTo(b)
	return resp.StatusCode, b.String(), resp.Header
}

// One principal holds at most admin.maxConcurrentRequestsPerPrincipal requests at once; the
// others are served meanwhile. A principal is the authenticated role or, for a client without
// one (authentication off, the anonymous role), its address.
func TestConcurrencyPerPrincipal(t *testing.T) {
	for _, tc := range []struct {
		name             string
		auth             Authenticator
		hog, other       string // "role:<name>" (a token) or "addr:<ip>"
		refusalNames     string
		principalsAreIPs bool
	}{
		{"roles", fakeAuth{}, "role:mallory", "role:alice", "principal mallory", false},
		{"addresses without authentication", nil, "addr:127.0.0.1", "addr:127.0.0.2", "your address", true},
		{"addresses of the anonymous role", fakeAuth{anonymous: "anon"}, "addr:127.0.0.1", "addr:127.0.0.2", "your address", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var in atomic.Int32
			brk := newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if r.URL.Path == "/admin/v2/hog" {
					in.Add(1)
					<-release
				}
				w.Write([]byte("{}"))
			})
			tp := newProxy(t, Config{Brokers: static(t, brk.url()), Auth: tc.auth, MaxConcurrent: 4, MaxConcurrentPerPrincipal: 2})
			as := func(who, path string) (int, string, http.Header) { return getAs(t, tp, who, path) }
			var wg sync.WaitGroup
			defer wg.Wait()
			defer close(release)
			for range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); as(tc.hog, "/admin/v2/hog") }()
			}
			wait.Until(t, 10*time.Second, "two requests held at the broker", func() bool { return in.Load() == 2 })
			code, body, hdr := as(tc.hog, "/admin/v2/clusters")
			if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(reasonOf(t, body), "more than 2 admin requests at once from "+tc.refusalNames) {
				t.Errorf("a third request of the same principal: %d %s", code, body)
			}
			if code, body, _ := as(tc.other, "/admin/v2/clusters"); code != http.StatusOK {
				t.Errorf("another principal: %d %s", code, body)
			}
			if got := counter(t, tp.reg, "pulsar_proxy_http_requests_rejected_total", "reason", rejectPrincipal); got != 1 {
				t.Errorf("rejected{concurrency_per_principal} = %v", got)
			}
		})
	}
}

// The deadline of each read of a body: the pause bound, or the average-rate floor where it
// comes first.
func TestBodyReaderDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		r       bodyReader
		wantIn  time.Duration
		wantWhy error
	}{
		{"pause only", bodyReader{pause: 30 * time.Second}, 30 * time.Second, errClientStalled},
		{"fresh body: the grace", bodyReader{pause: 30 * time.Second, minRate: 1000, grace: 5 * time.Second}, 5 * time.Second, errBodyTooSlow},
		{"bytes earn time", bodyReader{pause: 30 * time.Second, minRate: 1000, grace: 5 * time.Second, n: 10000, waited: 4 * time.Second}, 11 * time.Second, errBodyTooSlow},
		{"fast enough: the pause comes first", bodyReader{pause: 30 * time.Second, minRate: 1000, grace: 5 * time.Second, n: 1 << 20}, 30 * time.Second, errClientStalled},
		{"below the floor already", bodyReader{pause: 30 * time.Second, minRate: 1000, grace: 5 * time.Second, n: 3, waited: 6 * time.Second}, -time.Second + 3*time.Millisecond, errBodyTooSlow},
		{"no bound", bodyReader{}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, why := tc.r.deadline(now)
			var in time.Duration
			if !d.IsZero() {
				in = d.Sub(now)
			}
			if in != tc.wantIn || why != tc.wantWhy {
				t.Errorf("deadline in %v (%v), want %v (%v)", in, why, tc.wantIn, tc.wantWhy)
			}
		})
	}
}
