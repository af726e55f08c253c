package discovery

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/rs/zerolog"
)

// fakeConsul serves /v1/health/service/<name> with blocking queries, the way the agent does,
// so the provider's loop can be driven step by step. The real agent is used end to end.
type fakeConsul struct {
	mu      sync.Mutex
	index   uint64
	entries []map[string]any
	changed chan struct{}
	queries int
	blocked int // queries that arrived with the current index (waiting for a change)
}

func newFakeConsul() *fakeConsul { return &fakeConsul{index: 1, changed: make(chan struct{})} }

func (f *fakeConsul) set(entries ...map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	f.index++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/health/service/brokers" || r.URL.Query().Get("passing") == "" {
		http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
		return
	}
	idx, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	f.mu.Lock()
	f.queries++
	ch := f.changed
	if idx != 0 && idx == f.index {
		f.blocked++
		f.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
		f.mu.Lock()
	}
	body, _ := json.Marshal(f.entries)
	w.Header().Set("X-Consul-Index", strconv.FormatUint(f.index, 10))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

func (f *fakeConsul) waitBlocked(t *testing.T, n int) {
	t.Helper()
	blocked := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.blocked
	}
	if !wait.Within(10*time.Second, func() bool { return blocked() >= n }) {
		t.Fatalf("provider never came back with a blocking query (%d so far, want %d)", blocked(), n)
	}
}

func instance(id, addr string, port int, meta map[string]string) map[string]any {
	return map[string]any{
		"Node":    map[string]any{"Node": "n1", "Address": "10.9.9.9"},
		"Service": map[string]any{"ID": id, "Service": "brokers", "Address": addr, "Port": port, "Meta": meta},
		"Checks":  []any{},
	}
}

func waitBrokers(t *testing.T, d brokers.Discovery, want ...string) {
	t.Helper()
	var got []string
	if !wait.Within(10*time.Second, func() bool {
		got = got[:0]
		for _, b := range d.Brokers() {
			got = append(got, b.URL)
		}
		return equalStrings(got, want)
	}) {
		t.Fatalf("brokers %v, want %v", got, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestConsulFollowsServiceWithBlockingQueries(t *testing.T) {
	fc := newFakeConsul()
	fc.set(
		instance("b1", "127.0.0.1", 6650, nil),
		instance("b2", "", 8080, map[string]string{pulsarPortMeta: "6651"}), // node address, meta port
		instance("bad1", "not a host!", 6650, nil),
		instance("bad2", "127.0.0.1", 0, nil),
		instance("bad3", "127.0.0.1", 6650, map[string]string{pulsarPortMeta: "x"}),
		instance("bad4", "evil:1/x?", 6650, nil),
	)
	srv := httptest.NewServer(fc)
	defer srv.Close()
	m := NewMetrics(nil)
	c, err := NewConsul(ConsulConfig{Service: "brokers", Address: srv.Listener.Addr().String(), WaitTime: time.Minute,
		retryMin: 10 * time.Millisecond, retryMax: 50 * time.Millisecond}, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitBrokers(t, c, "pulsar://127.0.0.1:6650", "pulsar://10.9.9.9:6651")
	fc.waitBlocked(t, 1) // no polling: the provider waits on the index
	fc.set(instance("b1", "127.0.0.1", 6650, nil))
	waitBrokers(t, c, "pulsar://127.0.0.1:6650")
	fc.waitBlocked(t, 2)
	fc.mu.Lock()
	queries := fc.queries
	fc.mu.Unlock()
	if queries > 4 {
		t.Fatalf("%d queries for 2 changes: the provider is polling", queries)
	}

	// Every instance gone: not believed, the last list stays and is marked stale.
	fc.set()
	fc.waitBlocked(t, 3)
	waitBrokers(t, c, "pulsar://127.0.0.1:6650")
	if !c.isStale() || testutil.ToFloat64(m.discoveryStale.WithLabelValues("consul")) != 1 {
		t.Fatal("empty answer did not mark the provider stale")
	}

	// Consul unreachable: the list stays, errors counted, and it recovers.
	// Listener first: a query accepted after the connections were cut would block for WaitTime.
	srv.Listener.Close()
	srv.CloseClientConnections()
	if !wait.Within(10*time.Second, func() bool { return testutil.ToFloat64(m.discoveryErrors.WithLabelValues("consul")) >= 3 }) {
		t.Fatalf("%v discovery errors counted while the agent is down, want 3", testutil.ToFloat64(m.discoveryErrors.WithLabelValues("consul")))
	}
	waitBrokers(t, c, "pulsar://127.0.0.1:6650")
	ln, err := net.Listen("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("cannot reopen the fake agent's port: %v", err)
	}
	srv2 := &http.Server{Handler: fc}
	go srv2.Serve(ln)
	defer srv2.Close()
	fc.set(instance("b2", "127.0.0.2", 6650, nil))
	waitBrokers(t, c, "pulsar://127.0.0.2:6650")
	if c.isStale() {
		t.Fatal("still stale after recovery")
	}
}

func TestConsulBrokerAddressRules(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "::1", "broker-0.broker.pulsar.svc"} {
		if _, err := consulBroker(&consul.ServiceEntry{Service: &consul.AgentService{ID: "b", Address: h, Port: 6650}}, false); err != nil {
			t.Errorf("address %q: %v", h, err)
		}
	}
	// An underscore is no host-name character (RFC 1123), nor is a numeric last label.
	for _, h := range []string{"a b", "-a", "a-", "a..b", "a/b", "a:b", "a@b", ".a", "b_1.local", "127.1", "b.local."} {
		if b, err := consulBroker(&consul.ServiceEntry{Service: &consul.AgentService{ID: "b", Address: h, Port: 6650}}, false); err == nil {
			t.Errorf("address %q accepted as %+v", h, b)
		}
	}
	for _, name := range []string{"_pulsar._tcp.broker.pulsar.svc", "broker.pulsar.svc"} {
		if !validQueryName(name) {
			t.Errorf("validQueryName(%q) = false", name)
		}
	}
}
