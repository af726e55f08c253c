package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/go-zookeeper/zk"

	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

const zkBrokers = "/loadbalance/brokers"

// zkSessionTimeout is the session the proxy asks the rig's ZooKeeper for (2 ticks of 2 s is
// its floor), short so the expiry step below stays short.
const zkSessionTimeout = 4 * time.Second

// rigZK opens a session on the rig's ZooKeeper, as a reader of what the brokers registered.
func rigZK(t *testing.T) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{theRig.ZooKeeper}, 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// registered reads the brokers' registrations (broker id → data).
func registered(t *testing.T, c *zk.Conn) map[string]map[string]any {
	t.Helper()
	ids, _, err := c.Children(zkBrokers)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, id := range ids {
		data, _, err := c.Get(zkBrokers + "/" + id)
		if err != nil {
			continue // gone since the listing
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s/%s is not JSON: %v: %q", zkBrokers, id, err, data)
		}
		out[id] = m
	}
	return out
}

func startZKProxy(t *testing.T) *proxy {
	t.Helper()
	return startProxy(t, nil, fmt.Sprintf(`discovery:
  healthCheckInterval: 500ms
  metadataStore:
    url: "zk:%s"
    sessionTimeout: %s
broker:
  allowedPorts: [%s]
  allowedWebPorts: [%s]
`, theRig.ZooKeeper, zkSessionTimeout, rigPorts(), rigWebPorts()))
}

// TestDiscoveryMetadataStoreFollowsBrokers: the proxy knows the brokers only from their
// registrations in the rig's ZooKeeper; a stopped broker is dropped when its znode goes, a
// restarted one comes back, and a session the server expired is replaced.
func TestDiscoveryMetadataStoreFollowsBrokers(t *testing.T) {
	zc := rigZK(t)
	regs := registered(t, zc)
	for _, b := range theRig.Brokers {
		r, ok := regs[b.ID]
		if !ok {
			t.Fatalf("broker %d (%s) not registered under %s: %v", b.N, b.ID, zkBrokers, slices.Collect(maps.Keys(regs)))
		}
		// What the provider reads, as the broker wrote it.
		if r["pulsarServiceUrl"] != b.URL || r["webServiceUrl"] != b.HTTP || r["pulsarServiceUrlTls"] != b.TLSURL || r["webServiceUrlTls"] != b.HTTPS {
			t.Fatalf("broker %d registration: %v", b.N, r)
		}
		al, _ := json.Marshal(r["advertisedListeners"])
		t.Logf("broker %d registration: pulsarServiceUrl %v, pulsarServiceUrlTls %v, webServiceUrl %v, webServiceUrlTls %v, advertisedListeners %s",
			b.N, r["pulsarServiceUrl"], r["pulsarServiceUrlTls"], r["webServiceUrl"], r["webServiceUrlTls"], al)
	}

	// check-config --connect finds them the same way.
	cfg := writeConfig(t, fmt.Sprintf("discovery:\n  metadataStore:\n    url: \"zk:%s\"\nbroker:\n  allowedPorts: [%s]\n", theRig.ZooKeeper, rigPorts()))
	if code, _, stderr := runProxy(t, nil, "check-config", "--connect", "--quiet", cfg); code != 0 ||
		!strings.Contains(stderr, "discovery.metadataStore: 2 broker(s)") || strings.Count(stderr, "CONNECTED") != 2 {
		t.Fatalf("check-config --connect with the metadata store: exit %d\n%s", code, stderr)
	}

	proxy := startZKProxy(t)
	proxy.waitReady(t)
	if n := proxy.metric(t, "pulsar_proxy_discovery_brokers", `provider="metadataStore"`); n != 2 {
		t.Fatalf("metadataStore lists %v brokers, want 2", n)
	}
	if !targetAllowed(t, proxy, 1) || !targetAllowed(t, proxy, 2) {
		t.Fatal("a registered broker is refused as a target")
	}
	// The web service URLs come from the registrations too: the admin API works with no other source.
	if code, body := proxy.get("/admin/v2/clusters"); code != 200 {
		t.Fatalf("admin API through the proxy: %d %s", code, body)
	}
	c := newClient(t, proxy.PulsarURL)
	produce(t, c, uniqueTopic(t, "zk-before"), 100)

	// Broker 2 stops: its ephemeral znode goes with its session; the proxy drops it.
	gone, dropped := watchRegistration(t, zc, theRig.BrokerID(2), false), watchDiscovered(t, proxy, 1)
	t0 := time.Now()
	stopBroker2(t)
	znodeGone, proxyDropped := <-gone, <-dropped
	t.Logf("broker 2 stopped (SIGTERM): its znode deleted %s after the signal (its shutdown closes its session), dropped by the proxy %s after that",
		znodeGone.Sub(t0).Round(time.Millisecond), after(t, proxyDropped, znodeGone, "the proxy dropping stopped broker 2"))
	if targetAllowed(t, proxy, 2) {
		t.Fatal("stopped broker 2 still allowed as a target")
	}
	before := brokerRequests(t, proxy, 2)
	produce(t, c, uniqueTopic(t, "zk-one-broker"), 50)
	if after := brokerRequests(t, proxy, 2); after != before {
		t.Fatalf("lookups sent to stopped broker 2 (%v → %v)", before, after)
	}
	restartBroker2(t, zc, proxy)

	// A crashed broker (SIGKILL) closes nothing: its znode stays until ZooKeeper expires its
	// session (the broker's metadataStoreSessionTimeoutMillis, 30 s by default), then goes.
	gone, dropped = watchRegistration(t, zc, theRig.BrokerID(2), false), watchDiscovered(t, proxy, 1)
	broker2Down = true
	t0 = time.Now()
	if err := theRig.KillBroker(t.Context(), 2); err != nil { // through the rig: not started again
		t.Fatal(err)
	}
	select {
	case znodeGone = <-gone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the killed broker's znode never went")
	}
	proxyDropped = <-dropped
	t.Logf("broker 2 killed (SIGKILL): its znode expired %s after the kill, dropped by the proxy %s after that",
		znodeGone.Sub(t0).Round(time.Millisecond), after(t, proxyDropped, znodeGone, "the proxy dropping killed broker 2"))
	if targetAllowed(t, proxy, 2) {
		t.Fatal("killed broker 2 still allowed as a target")
	}
	restartBroker2(t, zc, proxy)

	// The proxy frozen past its session timeout: ZooKeeper expires the session, and the
	// thawed proxy opens a new one and reads the brokers again.
	expireSession(t, proxy)
	waited := time.Now()
	wait.Until(t, 60*time.Second, "discovery fresh on a new session", func() bool {
		return proxy.metric(t, "pulsar_proxy_discovery_stale", `provider="metadataStore"`) == 0 &&
			proxy.metric(t, "pulsar_proxy_discovery_brokers", `provider="metadataStore"`) == 2
	})
	fresh := time.Since(waited)
	if !targetAllowed(t, proxy, 1) || !targetAllowed(t, proxy, 2) {
		t.Fatal("a broker refused after the session was replaced")
	}
	t.Logf("the proxy's session expired while it was stopped (SIGSTOP %s, session %s); fresh on a new session %s after its expiry was logged",
		3*zkSessionTimeout, zkSessionTimeout, fresh.Round(time.Millisecond))
	produce(t, c, uniqueTopic(t, "zk-after"), 100)
}

// restartBroker2 starts broker 2 again and checks the proxy takes it back.
func restartBroker2(t *testing.T, zc *zk.Conn, proxy *proxy) {
	t.Helper()
	back, seen := watchRegistration(t, zc, theRig.BrokerID(2), true), watchDiscovered(t, proxy, 2)
	startBroker2(t)
	znodeBack, proxySaw := <-back, <-seen
	t.Logf("broker 2 restarted: registered, and listed by the proxy %s after that", after(t, proxySaw, znodeBack, "the proxy listing restarted broker 2"))
	if !targetAllowed(t, proxy, 2) {
		t.Fatal("restarted broker 2 refused as a target")
	}
	wait.Until(t, 60*time.Second, "both brokers healthy", func() bool {
		return proxy.metric(t, "pulsar_proxy_brokers", `state="healthy"`) == 2
	})
}

// watchDiscovered reports when the proxy's metadataStore provider lists want brokers, polling
// its /metrics every 10 ms (the observer only; the proxy itself is told by a watch).
func watchDiscovered(t *testing.T, p *proxy, want float64) <-chan time.Time {
	t.Helper()
	out := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			if s, err := metrics.Fetch(p.HTTPURL + "/metrics"); err == nil {
				if v, err := s.Value("pulsar_proxy_discovery_brokers", `provider="metadataStore"`); err == nil && v == want {
					out <- time.Now()
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		out <- time.Time{} // never: the reader fails on the zero time
	}()
	return out
}

// after is how long after from the observer saw its event; it fails the test when it never did.
func after(t *testing.T, at, from time.Time, what string) time.Duration {
	t.Helper()
	if at.IsZero() {
		t.Fatalf("never seen: %s", what)
	}
	return at.Sub(from).Round(time.Millisecond)
}

// watchRegistration reports when broker id's znode exists (present) or is gone (!present).
func watchRegistration(t *testing.T, c *zk.Conn, id string, present bool) <-chan time.Time {
	t.Helper()
	out := make(chan time.Time, 1)
	go func() {
		for {
			ok, _, w, err := c.ExistsW(zkBrokers + "/" + id)
			if err == nil && ok == present {
				out <- time.Now()
				return
			}
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			<-w
		}
	}()
	return out
}

// expireSession stops the proxy process (SIGSTOP) until ZooKeeper has expired its session.
func expireSession(t *testing.T, p *proxy) {
	t.Helper()
	expired := p.count(t, "pulsar_proxy_discovery_errors_total", `provider="metadataStore"`)
	if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * zkSessionTimeout) // the server expires it after one timeout without a ping
	if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 30*time.Second, "the lost session reported", func() bool {
		return p.count(t, "pulsar_proxy_discovery_errors_total", `provider="metadataStore"`) > expired
	})
	wait.Until(t, 30*time.Second, "the proxy's log says the session expired", func() bool {
		return strings.Contains(p.LogTail(400), "session has been expired")
	})
}

// zkOutageTraffic sends on producer until stop, recording what was acknowledged and what failed.
type zkOutageTraffic struct {
	mu       sync.Mutex
	acked    map[int]bool
	failures []string
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startTraffic(producer pulsar.Producer) *zkOutageTraffic {
	tr := &zkOutageTraffic{acked: map[int]bool{}, stop: make(chan struct{})}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			default:
			}
			_, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: payloadFor(i)})
			tr.mu.Lock()
			if err == nil {
				tr.acked[i] = true
			} else {
				tr.failures = append(tr.failures, fmt.Sprintf("send %d: %v", i, err))
			}
			tr.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return tr
}

func (tr *zkOutageTraffic) ackedNow() int { tr.mu.Lock(); defer tr.mu.Unlock(); return len(tr.acked) }

func (tr *zkOutageTraffic) end() { close(tr.stop); tr.wg.Wait() }

// TestDiscoveryMetadataStoreOutage stops the rig's ZooKeeper while messages flow through the
// proxy, for well under the brokers' session timeout, and starts it again before returning.
func TestDiscoveryMetadataStoreOutage(t *testing.T) {
	proxy := startZKProxy(t)
	proxy.waitReady(t)
	c := newClient(t, proxy.PulsarURL)
	topic, owners := partitionedTopicOnBothBrokers(t, "zk-outage", 4)
	t.Logf("partition owners: %v", owners)
	consumer := subscribe(t, c, topic, "s", pulsar.Shared)
	// A send timeout far beyond any reconnection: a send that still fails was lost.
	producer, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	// A second client's producer, opened now, sends during the outage on its own sessions.
	c2 := newClient(t, proxy.PulsarURL)
	topic2 := uniqueTopic(t, "zk-outage-2")
	p2, err := c2.CreateProducer(pulsar.ProducerOptions{Topic: topic2, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	tr := startTraffic(producer)
	wait.Until(t, 60*time.Second, "traffic flowing", func() bool { return tr.ackedNow() >= 50 })

	zkDown := true
	t.Cleanup(func() {
		if zkDown {
			theRig.StartZooKeeper(context.Background())
		}
	})
	t0 := time.Now()
	if err := theRig.StopZooKeeper(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(t0)
	waited := time.Now()
	wait.Until(t, 30*time.Second, "discovery marked stale", func() bool {
		return proxy.metric(t, "pulsar_proxy_discovery_stale", `provider="metadataStore"`) == 1
	})
	staleAfter := time.Since(waited)
	s1 := proxy.metric(t, "pulsar_proxy_discovery_staleness_seconds", `provider="metadataStore"`)
	base := tr.ackedNow()
	wait.Until(t, 20*time.Second, "messages acknowledged while ZooKeeper is down", func() bool { return tr.ackedNow() >= base+100 })
	for i := range 50 {
		if _, err := p2.Send(context.Background(), &pulsar.ProducerMessage{Payload: payloadFor(i)}); err != nil {
			t.Fatalf("second client, send %d during the outage: %v", i, err)
		}
	}
	wait.Until(t, 20*time.Second, "staleness growing", func() bool {
		return proxy.metric(t, "pulsar_proxy_discovery_staleness_seconds", `provider="metadataStore"`) > s1+2
	})
	s2 := proxy.metric(t, "pulsar_proxy_discovery_staleness_seconds", `provider="metadataStore"`)
	if code, body := proxy.get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d while the last known brokers answer: %s", code, body)
	}
	if live := proxy.metric(t, "pulsar_proxy_brokers", `state="live"`); live != 2 {
		t.Fatalf("live brokers = %v during the outage, want the last known 2", live)
	}
	if !targetAllowed(t, proxy, 1) || !targetAllowed(t, proxy, 2) {
		t.Fatal("a last known broker refused as a target during the outage")
	}
	during := tr.ackedNow() - base

	t1 := time.Now()
	if err := theRig.StartZooKeeper(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	zkDown = false
	outage := time.Since(t0)
	waited = time.Now()
	wait.Until(t, 60*time.Second, "discovery fresh again", func() bool {
		return proxy.metric(t, "pulsar_proxy_discovery_stale", `provider="metadataStore"`) == 0
	})
	fresh := time.Since(waited)
	if s3 := proxy.metric(t, "pulsar_proxy_discovery_staleness_seconds", `provider="metadataStore"`); s3 != 0 {
		t.Fatalf("staleness %v after recovery, was %v", s3, s2)
	}
	if n := proxy.metric(t, "pulsar_proxy_discovery_brokers", `provider="metadataStore"`); n != 2 {
		t.Fatalf("metadataStore lists %v brokers after recovery, want 2", n)
	}
	base = tr.ackedNow()
	wait.Until(t, 60*time.Second, "messages acknowledged after ZooKeeper returned", func() bool { return tr.ackedNow() >= base+50 })
	tr.end()
	t.Logf("ZooKeeper stopped in %s, down %s in all (restart took %s); stale %s after the stop; staleness %.1fs → %.1fs; %d sends acknowledged during the outage (+50 by a second client); fresh %s after ZooKeeper answered again",
		stopped.Round(time.Millisecond), outage.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond)-fresh.Round(time.Millisecond),
		staleAfter.Round(time.Millisecond), s1, s2, during, fresh.Round(time.Millisecond))
	t.Logf("sends: %d acknowledged, %d failed", len(tr.acked), len(tr.failures))
	if len(tr.failures) > 0 {
		t.Fatalf("%d sends failed across the ZooKeeper outage, first: %s", len(tr.failures), tr.failures[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for missing := len(tr.acked); missing > 0; {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("%d of %d acknowledged messages never arrived: %v", missing, len(tr.acked), err)
		}
		consumer.Ack(msg)
		if i := indexOf(msg.Payload()); tr.acked[i] {
			tr.acked[i] = false // counted once, whatever the redeliveries
			missing--
		}
	}
}

// TestDiscoveryMetadataStoreTLS: the proxy reads the registrations over ZooKeeper's TLS port,
// which wants a client certificate, and checks the server's certificate for the name dialled.
func TestDiscoveryMetadataStoreTLS(t *testing.T) {
	if theRig.ZooKeeperTLS == "" {
		t.Fatal("the rig's ZooKeeper has no TLS port (RIG_ZK_TLS_PORT)")
	}
	cert, key := rigProxyCert()
	proxy := startProxy(t, nil, fmt.Sprintf(`discovery:
  healthCheckInterval: 500ms
  metadataStore:
    url: "zk:%s"
    tls: {enabled: true, trustCertsFile: %q, certFile: %q, keyFile: %q}
broker:
  allowedPorts: [%s]
`, theRig.ZooKeeperTLS, rigCA(), cert, key, rigPorts()))
	proxy.waitReady(t)
	if n := proxy.metric(t, "pulsar_proxy_discovery_brokers", `provider="metadataStore"`); n != 2 {
		t.Fatalf("metadataStore over TLS lists %v brokers, want 2", n)
	}
	if !targetAllowed(t, proxy, 1) || !targetAllowed(t, proxy, 2) {
		t.Fatal("a registered broker is refused as a target")
	}
	produce(t, newClient(t, proxy.PulsarURL), uniqueTopic(t, "zk-tls"), 50)

	// Without a client certificate the server refuses the session: nothing is discovered.
	bare := startProxy(t, nil, fmt.Sprintf(`discovery:
  metadataStore:
    url: "zk:%s"
    tls: {enabled: true, trustCertsFile: %q}
broker:
  allowedPorts: [%s]
`, theRig.ZooKeeperTLS, rigCA(), rigPorts()))
	wait.Until(t, 30*time.Second, "the refused session reported", func() bool {
		return bare.count(t, "pulsar_proxy_discovery_errors_total", `provider="metadataStore"`) >= 1
	})
	if n := bare.metric(t, "pulsar_proxy_discovery_brokers", `provider="metadataStore"`); n != 0 {
		t.Fatalf("%v brokers discovered without a client certificate", n)
	}
}
