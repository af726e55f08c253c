package connlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/prereq"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serveLimited serves a trivial handler over NewListener(c) on 127.0.0.1, with a long header
// timeout (half-sent requests stay until the test ends), stopped when the test ends.
func serveLimited(t *testing.T, c ListenerConfig) (addr string, m *ListenerMetrics) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Metrics = NewListenerMetrics(prometheus.NewRegistry())
	c.Log = zerolog.Nop()
	srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok"))
	})}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(NewListener(ln, c)) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String(), c.Metrics
}

// dialFrom connects to addr from the loopback address src ("" for any); it skips the test
// where the system cannot bind src (only Linux routes all of 127/8 to loopback).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		prereq.Need(t, "a connection from "+src, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends a whole request on c and returns the status line of the answer.
func get(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer within 10 s from a client within the limits: %v", err)
	}
	return strings.TrimSpace(line)
}

// Many half-sent requests from one IP: the listener holds the per-IP cap of them and closes
// the rest as they come; a client from another IP is served at once, and one from the same IP
// once a held connection is gone.
func TestListenerHalfSentFloodFromOneIP(t *testing.T) {
	const perIP, flood = 5, 300
	addr, m := serveLimited(t, ListenerConfig{Name: "http", Limits: Limits{MaxPerIP: perIP}})
	conns := make([]net.Conn, flood)
	for i := range conns {
		conns[i] = dialFrom(t, "127.0.0.1", addr)
		fmt.Fprintf(conns[i], "GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n") // no blank line: never complete
	}
	refused := m.refused.WithLabelValues("http", ReasonTooManyFromIP)
	if !wait.Within(10*time.Second, func() bool { return testutil.ToFloat64(refused) == flood-perIP }) {
		t.Fatalf("waited 10 s for %d refusals (%v so far)", flood-perIP, testutil.ToFloat64(refused))
	}
	if open := testutil.ToFloat64(m.open.WithLabelValues("http")); open != perIP {
		t.Fatalf("the listener holds %v connections of the flood, want the per-IP cap %d", open, perIP)
	}
	other := dialFrom(t, "127.0.0.2", addr)
	if got := get(t, other); got != "HTTP/1.1 200 OK" {
		t.Fatalf("another IP got %q", got)
	}
	other.Close()
	for _, c := range conns {
		c.Close()
	}
	wait.Until(t, 10*time.Second, "the flood's connections to be given back", func() bool {
		return testutil.ToFloat64(m.open.WithLabelValues("http")) == 0
	})
	if got := get(t, dialFrom(t, "127.0.0.1", addr)); got != "HTTP/1.1 200 OK" {
		t.Fatalf("the flooding IP, once its connections are closed, got %q", got)
	}
	if got := testutil.ToFloat64(m.clientIPs.WithLabelValues("http")); got != 1 {
		t.Errorf("client IPs %v, want 1", got)
	}
}

// Each limit refuses the connection over it as it is accepted, counted by its reason; a
// plaintext listener first writes its Refusal, and a closed connection frees its place.
// reported records what a listener tells the log's summaries.
type reported struct {
	mu  sync.Mutex
	got []string
}

func (r *reported) Refused(k refusal.Kind, detail, remote, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !strings.HasPrefix(remote, "127.0.0.1:") {
		detail += " from " + remote
	}
	r.got = append(r.got, string(k)+"/"+detail)
}

func (r *reported) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func TestListenerLimits(t *testing.T) {
	refusal := []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
	for _, tc := range []struct {
		name   string
		limits Limits
		budget bool
		reason string
	}{
		{"maxConnections", Limits{MaxConnections: 2}, false, ReasonTooManyConnections},
		{"maxPerIP", Limits{MaxPerIP: 2}, false, ReasonTooManyFromIP},
		{"ratePerIP", Limits{RatePerIP: 0.001, BurstPerIP: 2}, false, ReasonConnectRate},
		{"descriptor budget", Limits{}, true, ReasonDescriptors},
	} {
		t.Run(tc.name, func(t *testing.T) {
			told := &reported{}
			c := ListenerConfig{Name: "http", Limits: tc.limits, Refusal: refusal, Refusals: told}
			if tc.budget {
				c.Share = NewBudget(2*2+4, 4, nil).Share("http", 0, 0) // 2 connections
			}
			addr, m := serveLimited(t, c)
			first := dialFrom(t, "", addr)
			for _, h := range []net.Conn{first, dialFrom(t, "", addr)} {
				if got := get(t, h); got != "HTTP/1.1 200 OK" {
					t.Fatalf("a connection within the limit got %q", got)
				}
			}
			over := dialFrom(t, "", addr)
			over.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(over)
			if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 503") {
				t.Fatalf("over the limit: %q, %v; want the refusal, then the connection closed", b, err)
			}
			if got := testutil.ToFloat64(m.refused.WithLabelValues("http", tc.reason)); got != 1 {
				t.Errorf("refused{%s} = %v, want 1", tc.reason, got)
			}
			if got := told.all(); len(got) != 1 || got[0] != "connection_limit/http "+tc.reason {
				t.Errorf("reported to the log's summaries: %v", got)
			}
			if tc.reason == ReasonConnectRate {
				return // a closed connection gives no token back
			}
			first.Close()
			wait.Until(t, 10*time.Second, "the closed connection's place", func() bool { return testutil.ToFloat64(m.open.WithLabelValues("http")) == 1 })
			if got := get(t, dialFrom(t, "", addr)); got != "HTTP/1.1 200 OK" {
				t.Fatalf("after a close, got %q", got)
			}
		})
	}
}
