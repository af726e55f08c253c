package discovery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// fakeZK is an in-memory /loadbalance/brokers with ZooKeeper's one-shot watches, so the
// provider's state machine can be driven step by step. The real ZooKeeper is used end to end.
type fakeZK struct {
	mu       sync.Mutex
	exists   bool
	nodes    map[string][]byte
	watches  []chan zk.Event // child watches on the path
	ewatches []chan zk.Event // existence watches
	down     bool
	lists    int
	auths    []string
	session  func(zk.State)
}

func newFakeZK() *fakeZK { return &fakeZK{exists: true, nodes: map[string][]byte{}} }

func (f *fakeZK) dial(onSession func(zk.State)) (zkConn, error) {
	f.mu.Lock()
	f.session = onSession
	f.mu.Unlock()
	return f, nil
}

func (f *fakeZK) setState(s zk.State) {
	f.mu.Lock()
	f.down = s != zk.StateHasSession
	cb := f.session
	f.mu.Unlock()
	cb(s)
}

// put registers (data != nil) or removes a broker and fires the armed watches.
func (f *fakeZK) put(name string, data []byte) {
	f.mu.Lock()
	if data == nil {
		delete(f.nodes, name)
	} else {
		f.nodes[name] = data
	}
	ws, ews := f.watches, f.ewatches
	if !f.exists {
		f.exists = true
		f.ewatches = nil
		ws = nil
	} else {
		ews = nil
	}
	f.watches = nil
	f.mu.Unlock()
	for _, w := range append(ws, ews...) {
		w <- zk.Event{Type: zk.EventNodeChildrenChanged}
		close(w)
	}
}

func (f *fakeZK) ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if path != zkBrokersPath {
		return nil, nil, nil, fmt.Errorf("unexpected path %s", path)
	}
	if f.down {
		return nil, nil, nil, zk.ErrConnectionClosed
	}
	if !f.exists {
		return nil, nil, nil, zk.ErrNoNode
	}
	f.lists++
	var names []string
	for n := range f.nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	w := make(chan zk.Event, 1)
	f.watches = append(f.watches, w)
	return names, &zk.Stat{}, w, nil
}

func (f *fakeZK) ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false, nil, nil, zk.ErrConnectionClosed
	}
	w := make(chan zk.Event, 1)
	f.ewatches = append(f.ewatches, w)
	return f.exists, &zk.Stat{}, w, nil
}

func (f *fakeZK) Get(path string) ([]byte, *zk.Stat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, nil, zk.ErrConnectionClosed
	}
	d, ok := f.nodes[strings.TrimPrefix(path, zkBrokersPath+"/")]
	if !ok {
		return nil, nil, zk.ErrNoNode
	}
	return d, &zk.Stat{}, nil
}

func (f *fakeZK) AddAuth(scheme string, auth []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auths = append(f.auths, scheme+" "+string(auth))
	return nil
}

func (f *fakeZK) Close() {}

func (f *fakeZK) listCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func registration(host string, port, web int) []byte {
	return fmt.Appendf(nil, `{"webServiceUrl":"http://%[1]s:%[3]d","pulsarServiceUrl":"pulsar://%[1]s:%[2]d","pulsarServiceUrlTls":"pulsar+ssl://%[1]s:%[4]d","webServiceUrlTls":"https://%[1]s:%[5]d","persistentTopicsEnabled":true,"advertisedListeners":{"internal":{"brokerServiceUrl":"pulsar://%[1]s-internal:%[2]d"}},"cpu":{"usage":1.5,"limit":200}}`,
		host, port, web, port+1, web+363)
}

func startFakeZK(t *testing.T, cfg ZooKeeperConfig) (*ZooKeeper, *fakeZK, *Metrics) {
	t.Helper()
	m := NewMetrics(nil)
	if cfg.Servers == nil {
		cfg.Servers = []string{"127.0.0.1:2181"}
	}
	cfg.retryMin, cfg.retryMax = time.Millisecond, 5*time.Millisecond
	z, err := NewZooKeeper(cfg, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeZK()
	z.dial = f.dial
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { z.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wait.Until(t, 10*time.Second, "the provider to dial the fake ZooKeeper", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.session != nil
	})
	return z, f, m
}

func waitZKBrokers(t *testing.T, z *ZooKeeper, want ...string) {
	t.Helper()
	var got []string
	if !wait.Within(10*time.Second, func() bool {
		got = got[:0]
		for _, b := range z.Brokers() {
			got = append(got, b.URL+" "+b.Web)
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	}) {
		t.Fatalf("brokers %q, want %q", got, want)
	}
}

func waitStale(t *testing.T, z *ZooKeeper, m *Metrics, want bool) {
	t.Helper()
	if !wait.Within(10*time.Second, func() bool { return z.isStale() == want }) {
		t.Fatalf("stale = %v, want %v", !want, want)
	}
	if got := testutil.ToFloat64(m.discoveryStale.WithLabelValues("metadataStore")) == 1; got != want {
		t.Fatalf("discovery_stale metric = %v, want %v", got, want)
	}
}

func TestZooKeeperFollowsRegistrationsWithWatches(t *testing.T) {
	z, f, m := startFakeZK(t, ZooKeeperConfig{Digest: "proxy:secret"})
	f.put("127.0.0.1:18080", registration("127.0.0.1", 16650, 18080))
	f.setState(zk.StateConnecting)
	f.setState(zk.StateConnected)
	f.setState(zk.StateHasSession)
	waitZKBrokers(t, z, "pulsar://127.0.0.1:16650 http://127.0.0.1:18080")
	waitStale(t, z, m, false)

	// A broker registering fires the child watch: read again, and the watch re-armed.
	f.put("127.0.0.1:18081", registration("127.0.0.1", 16651, 18081))
	waitZKBrokers(t, z, "pulsar://127.0.0.1:16650 http://127.0.0.1:18080", "pulsar://127.0.0.1:16651 http://127.0.0.1:18081")
	f.put("127.0.0.1:18080", nil)
	waitZKBrokers(t, z, "pulsar://127.0.0.1:16651 http://127.0.0.1:18081")
	if n := f.listCount(); n != 3 {
		t.Fatalf("%d listings for 2 changes after the first, want 3 (nothing polls)", n)
	}

	// Disconnected: the list is kept, stale at once, and staleness grows.
	f.setState(zk.StateDisconnected)
	waitStale(t, z, m, true)
	if s1 := z.staleness(); s1 <= 0 {
		t.Fatalf("staleness %v while disconnected", s1)
	}
	f.setState(zk.StateConnecting)
	f.setState(zk.StateConnecting)
	if got := testutil.ToFloat64(m.discoveryErrors.WithLabelValues("metadataStore")); got != 1 {
		t.Fatalf("%v errors for one outage, want 1", got)
	}
	waitZKBrokers(t, z, "pulsar://127.0.0.1:16651 http://127.0.0.1:18081")

	// A change while disconnected, then the session expires and a new one opens: read again.
	f.put("127.0.0.1:18080", registration("127.0.0.1", 16650, 18080))
	f.setState(zk.StateExpired)
	f.setState(zk.StateConnected)
	f.setState(zk.StateHasSession)
	waitZKBrokers(t, z, "pulsar://127.0.0.1:16650 http://127.0.0.1:18080", "pulsar://127.0.0.1:16651 http://127.0.0.1:18081")
	waitStale(t, z, m, false)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auths) != 1 || f.auths[0] != "digest proxy:secret" {
		t.Fatalf("auth added %q, want digest once (the client re-sends it)", f.auths)
	}
}

func TestZooKeeperKeepsListWhenAllBrokersGo(t *testing.T) {
	z, f, m := startFakeZK(t, ZooKeeperConfig{})
	f.put("b1:8080", registration("b1", 6650, 8080))
	f.setState(zk.StateHasSession)
	waitZKBrokers(t, z, "pulsar://b1:6650 http://b1:8080")
	f.put("b1:8080", nil)
	waitStale(t, z, m, true)
	waitZKBrokers(t, z, "pulsar://b1:6650 http://b1:8080")
	f.put("b2:8080", registration("b2", 6650, 8080))
	waitStale(t, z, m, false)
	waitZKBrokers(t, z, "pulsar://b2:6650 http://b2:8080")
}

func TestZooKeeperWaitsForThePathToExist(t *testing.T) {
	z, f, m := startFakeZK(t, ZooKeeperConfig{})
	f.mu.Lock()
	f.exists = false
	f.mu.Unlock()
	f.setState(zk.StateHasSession)
	wait.Until(t, 10*time.Second, "the missing path reported as the problem", func() bool {
		return strings.Contains(z.Problem(), "does not exist")
	})
	f.put("b1:8080", registration("b1", 6650, 8080))
	waitZKBrokers(t, z, "pulsar://b1:6650 http://b1:8080")
	waitStale(t, z, m, false)
}

func TestZooKeeperFirstConnectFailureIsReported(t *testing.T) {
	z, f, _ := startFakeZK(t, ZooKeeperConfig{})
	f.setState(zk.StateConnecting)
	time.Sleep(20 * time.Millisecond)
	if p := z.Problem(); !strings.Contains(p, "no answer yet") {
		t.Fatalf("problem %q during the first attempt, want none reported yet", p)
	}
	f.setState(zk.StateConnecting)
	wait.Until(t, 10*time.Second, "the second failed attempt reported as the problem", func() bool {
		return strings.Contains(z.Problem(), "Connecting")
	})
}

func TestParseZKBroker(t *testing.T) {
	data := registration("broker-0.pulsar", 6650, 8080)
	for _, c := range []struct {
		choice zkBrokerChoice
		want   string
	}{
		{zkBrokerChoice{}, "pulsar://broker-0.pulsar:6650 http://broker-0.pulsar:8080"},
		{zkBrokerChoice{TLS: true}, "pulsar+ssl://broker-0.pulsar:6651 https://broker-0.pulsar:8443"},
		{zkBrokerChoice{Listener: "internal"}, "pulsar://broker-0.pulsar-internal:6650 http://broker-0.pulsar:8080"},
	} {
		b, err := parseZKBroker(data, c.choice)
		if err != nil || b.URL+" "+b.Web != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.choice, b.URL+" "+b.Web, err, c.want)
		}
	}
	for _, c := range []struct {
		data   string
		choice zkBrokerChoice
		err    string
	}{
		{`not json`, zkBrokerChoice{}, "not a broker registration"},
		{`{"webServiceUrl":"http://b:8080"}`, zkBrokerChoice{}, "no pulsarServiceUrl"},
		{`{"pulsarServiceUrl":"pulsar://b:6650"}`, zkBrokerChoice{TLS: true}, "no pulsarServiceUrlTls"},
		{`{"pulsarServiceUrl":"pulsar://b:6650"}`, zkBrokerChoice{Listener: "x"}, `no advertised listener "x"`},
		{`{"pulsarServiceUrl":"pulsar+ssl://b:6651"}`, zkBrokerChoice{}, "wrong scheme"},
		{`{"pulsarServiceUrl":"pulsar://b/x:6650"}`, zkBrokerChoice{}, "broker URL"},
	} {
		if _, err := parseZKBroker([]byte(c.data), c.choice); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s %+v: %v, want an error with %q", c.data, c.choice, err, c.err)
		}
	}
	// A broker without a web service URL is listed, without the admin API; one with a web URL
	// that is not one keeps it as written, for brokers.Set to refuse (TestWebRuleZooKeeper).
	if b, err := parseZKBroker([]byte(`{"pulsarServiceUrl":"pulsar://b:6650/"}`), zkBrokerChoice{}); err != nil || b.Web != "" || b.URL != "pulsar://b:6650" {
		t.Errorf("%+v %v", b, err)
	}
	if b, err := parseZKBroker([]byte(`{"pulsarServiceUrl":"pulsar://b:6650","webServiceUrl":"ftp://b"}`), zkBrokerChoice{}); err != nil || b.Web != "ftp://b" || b.URL != "pulsar://b:6650" {
		t.Errorf("%+v %v", b, err)
	}
}

func TestZKHostsGoRoundAndKeepNames(t *testing.T) {
	var h zkHosts
	if err := h.Init([]string{"zk-0.zk:2181", "zk-1.zk:2181"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		s, retry := h.Next()
		got = append(got, fmt.Sprint(s, " ", retry))
	}
	h.Connected() // on zk-0 (the third try)
	s, retry := h.Next()
	got = append(got, fmt.Sprint(s, " ", retry))
	s, retry = h.Next()
	got = append(got, fmt.Sprint(s, " ", retry))
	want := []string{"zk-0.zk:2181 false", "zk-1.zk:2181 false", "zk-0.zk:2181 true", "zk-1.zk:2181 false", "zk-0.zk:2181 true"}
	if !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
}
