package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// Multiplexed broker connections (broker.multiplex): many client connections share a few
// proxy→broker connections; ids are mapped, payloads forwarded untouched.

// muxClientBinary is testdata/muxclient, built once for the package: a real client to kill.
var muxClientBinary string

func init() {
	beforeAll("build muxclient", func(dir string) error {
		out := filepath.Join(dir, "muxclient")
		cmd := exec.Command("go", "build", "-o", out, "./testdata/muxclient")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build muxclient: %v\n%s", err, b)
		}
		muxClientBinary = out
		return nil
	})
}

// muxYAML turns multiplexing on with at most conns connections per broker and principal
// (broker.multiplex alone: it implies session.passthrough: false).
func muxYAML(conns int) string {
	return fmt.Sprintf("broker:\n  multiplex: true\n  multiplexConnections: %d\n", conns)
}

// publisherAddrs is, per owning broker, the distinct addresses the brokers' topic stats show
// for the publishers of topic's partitions (one partition per entry of parts; "" for a
// non-partitioned topic): each address is one broker connection.
func publisherAddrs(t *testing.T, topics []string) (publishers int, addrs map[string]map[string]bool) {
	t.Helper()
	addrs = map[string]map[string]bool{}
	for _, topic := range topics {
		st, err := theRig.TopicStats(testCtx(t), topic)
		if err != nil {
			t.Fatalf("stats of %s: %v", topic, err)
		}
		if addrs[st.OwnerBroker] == nil {
			addrs[st.OwnerBroker] = map[string]bool{}
		}
		for _, p := range st.Publishers {
			publishers++
			addrs[st.OwnerBroker][p.Address] = true
		}
	}
	return publishers, addrs
}

// TestMultiplexManyClientsFewBrokerConnections: 60 clients (each its own connection to the
// proxy) with a producer each, on a topic of one broker and on a partitioned topic over
// both: the brokers see the proxy on at most multiplexConnections connections (their topic
// stats, by publisher address), every message arrives once and each producer's in order.
// The same count without multiplexing shows one connection per client, so the count is
// what it claims to be.
func TestMultiplexManyClientsFewBrokerConnections(t *testing.T) {
	const clients, perClient, maxConns = 60, 50, 2
	for _, multiplex := range []bool{true, false} {
		t.Run(fmt.Sprintf("multiplex=%v", multiplex), func(t *testing.T) {
			yaml := "session:\n  passthrough: false\n"
			if multiplex {
				yaml = muxYAML(maxConns)
			} else {
				saved := proxyproc.Env // the suite may run with multiplexing on (E2E_MULTIPLEX)
				proxyproc.Env = nil
				t.Cleanup(func() { proxyproc.Env = saved })
			}
			proxy := startProxy(t, brokerURLs(), yaml)
			topic := uniqueTopic(t, "mux-many")
			consumer := subscribe(t, newClient(t, proxy.PulsarURL), topic, "all", pulsar.Exclusive)
			producers := make([]pulsar.Producer, clients)
			for i := range producers {
				p, err := newClient(t, proxy.PulsarURL).CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: fmt.Sprintf("p%03d", i)})
				if err != nil {
					t.Fatalf("producer %d: %v", i, err)
				}
				producers[i] = p
			}
			publishers, addrs := publisherAddrs(t, []string{topic})
			conns := 0
			for _, a := range addrs {
				conns += len(a)
			}
			t.Logf("multiplex=%v: %d producers on %d broker connections (%v)", multiplex, publishers, conns, addrs)
			switch {
			case publishers != clients:
				t.Fatalf("the broker lists %d producers, want %d", publishers, clients)
			case multiplex && conns > maxConns:
				t.Fatalf("multiplexed: the broker sees %d connections from the proxy, want at most %d", conns, maxConns)
			case !multiplex && conns != clients:
				t.Fatalf("one connection per client: the broker sees %d connections, want %d", conns, clients)
			}
			produceAll(t, producers, perClient)
			receiveInProducerOrder(t, consumer, clients, perClient)
			if multiplex {
				if n := proxy.metric(t, "pulsar_proxy_multiplex_broker_connections"); n < 1 || n > 2*maxConns {
					t.Errorf("pulsar_proxy_multiplex_broker_connections = %v", n)
				}
			}
		})
	}
}

// produceAll sends perClient messages from every producer at once, "<producer>:<seq>".
func produceAll(t *testing.T, producers []pulsar.Producer, perClient int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(producers))
	for _, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range perClient {
				if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s:%d", p.Name(), seq)}); err != nil {
					errs <- fmt.Errorf("%s: %w", p.Name(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// receiveInProducerOrder receives every message once and checks each producer's order.
func receiveInProducerOrder(t *testing.T, c pulsar.Consumer, producers, perProducer int) {
	t.Helper()
	next := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for range producers * perProducer {
		msg, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(next), producers*perProducer, err)
		}
		name, seq, ok := strings.Cut(string(msg.Payload()), ":")
		if !ok || seq != fmt.Sprint(next[name]) {
			t.Fatalf("message %q: want %s:%d next", msg.Payload(), name, next[name])
		}
		next[name]++
		c.Ack(msg)
	}
	if len(next) != producers {
		t.Fatalf("messages of %d producers, want %d", len(next), producers)
	}
}

// TestMultiplexPartitionedAndSubscriptionTypes: a partitioned topic over both brokers,
// produced to and consumed with every subscription type through multiplexed connections.
func TestMultiplexPartitionedAndSubscriptionTypes(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), muxYAML(2))
	topic, owners := partitionedTopicOnBothBrokers(t, "mux-parts", 4)
	t.Logf("partition owners: %v", owners)
	c := newClient(t, proxy.PulsarURL)
	types := map[string]pulsar.SubscriptionType{"exclusive": pulsar.Exclusive, "shared": pulsar.Shared, "failover": pulsar.Failover, "key_shared": pulsar.KeyShared}
	consumers := map[string]pulsar.Consumer{}
	for name, typ := range types {
		consumers[name] = subscribe(t, c, topic, name, typ)
	}
	p, err := newClient(t, proxy.PulsarURL).CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := range n {
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Key: fmt.Sprint(i % 17), Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for name, cons := range consumers {
		seen := map[string]bool{}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for len(seen) < n {
			msg, err := cons.Receive(ctx)
			if err != nil {
				cancel()
				t.Fatalf("%s: received %d of %d: %v", name, len(seen), n, err)
			}
			seen[string(msg.Payload())] = true
			cons.Ack(msg)
		}
		cancel()
	}
	if proxy.metric(t, "pulsar_proxy_multiplex_clients") < 2 {
		t.Errorf("pulsar_proxy_multiplex_clients below the two clients")
	}
}

// TestMultiplexKilledClient: a real client (testdata/muxclient) killed mid-stream shares a
// broker connection with another client; the proxy closes the killed one's producer and
// consumer on the broker at once (its topic stats no longer list them), and the other
// client goes on producing and consuming without an error.
func TestMultiplexKilledClient(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), muxYAML(1))
	topic := uniqueTopic(t, "mux-kill")
	survivor := newClient(t, proxy.PulsarURL)
	cons := subscribe(t, survivor, topic, "survivor", pulsar.Shared)
	prod, err := survivor.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "survivor-producer"})
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(muxClientBinary, proxy.PulsarURL, topic, "victim")
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		close(ready)
	}()
	if !<-ready {
		t.Fatal("muxclient did not get ready")
	}
	// Both clients are live on the broker, over one connection from the proxy.
	st, err := theRig.TopicStats(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Publishers) != 2 || len(st.Subscriptions["victim"].Consumers) != 1 || st.Publishers[0].Address != st.Publishers[1].Address {
		t.Fatalf("before the kill: %s", st.Raw)
	}

	stop := make(chan struct{})
	survivorErr := make(chan error, 1)
	go func() { survivorErr <- keepProducing(prod, stop) }()
	time.Sleep(300 * time.Millisecond) // both mid-stream
	killed := time.Now()
	child.Process.Signal(syscall.SIGKILL)
	if !wait.Within(time.Minute, func() bool {
		if st, err = theRig.TopicStats(testCtx(t), topic); err != nil {
			t.Fatal(err)
		}
		return len(st.Publishers) == 1 && st.Publishers[0].ProducerName == "survivor-producer" && len(st.Subscriptions["victim"].Consumers) == 0
	}) {
		t.Fatalf("the killed client's producer or consumer is still on the broker: %s", st.Raw)
	}
	gone := time.Since(killed)
	t.Logf("the killed client's producer and consumer left the broker's topic stats %v after SIGKILL", gone.Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := <-survivorErr; err != nil {
		t.Fatalf("the other client on the same broker connection failed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cons.Receive(ctx); err != nil {
		t.Fatalf("the other client's consumer: %v", err)
	}
	if n := proxy.metric(t, "pulsar_proxy_multiplex_closes_on_leave_total"); n < 2 {
		t.Errorf("pulsar_proxy_multiplex_closes_on_leave_total = %v, want the killed client's producer and consumer", n)
	}
}

// keepProducing sends until stop is closed and returns the first error.
func keepProducing(p pulsar.Producer, stop <-chan struct{}) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "s%d", i)})
		cancel()
		if err != nil {
			return fmt.Errorf("send %d: %w", i, err)
		}
	}
}

// EnvMultiplex (E2E_MULTIPLEX=1) runs every proxy of the suite with broker.multiplex on, so
// the direct-session tests prove the multiplexed path too.
const EnvMultiplex = "E2E_MULTIPLEX"

// multiplexed reports whether the suite's proxies run with multiplexing on.
func multiplexed() bool { return len(proxyproc.Env) > 0 }

func init() {
	if os.Getenv(EnvMultiplex) == "1" {
		setMultiplexed()
	}
}

// setMultiplexed makes every proxy the suite starts from now on multiplex.
func setMultiplexed() {
	proxyproc.Env = []string{"PULSAR_PROXY_BROKER_MULTIPLEX=true"} // alone: it implies session.passthrough: false
}

// setPerClient undoes setMultiplexed: proxies started from now on are configured by their
// tests alone.
func setPerClient() { proxyproc.Env = nil }

// TestMultiplexBrokerConnectionLost: when broker 2 goes away, the proxy closes, at the client,
// the producer and consumer it had over the shared connection to broker 2 (its connection to
// the proxy stays open), and the client recreates them where the topic moves: every message
// is acknowledged and arrives. A client on broker 1 goes on unaffected.
func TestMultiplexBrokerConnectionLost(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), muxYAML(1))
	moving, staying := uniqueTopic(t, "mux-lost-2"), uniqueTopic(t, "mux-lost-1")
	if err := theRig.PlaceTopic(testCtx(t), moving, 2); err != nil {
		t.Fatal(err)
	}
	if err := theRig.PlaceTopic(testCtx(t), staying, 1); err != nil {
		t.Fatal(err)
	}
	type flow struct {
		p pulsar.Producer
		c pulsar.Consumer
	}
	open := func(topic string) flow {
		c := newClient(t, proxy.PulsarURL)
		cons := subscribe(t, c, topic, "s", pulsar.Exclusive)
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 3 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return flow{p, cons}
	}
	flows := map[string]flow{moving: open(moving), staying: open(staying)}
	send := func(topic string, from, to int) {
		for i := from; i < to; i++ {
			if _, err := flows[topic].p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
				t.Fatalf("%s: send %d: %v", topic, i, err)
			}
		}
	}
	send(moving, 0, 50)
	send(staying, 0, 50)
	closesBefore := proxy.count(t, "pulsar_proxy_session_closes_total", `reason="broker_closed"`)
	stopBroker2(t)
	send(staying, 50, 100) // the other broker's client, meanwhile
	send(moving, 50, 100)  // recreated on broker 1 once the topic moved there
	for topic, f := range flows {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		seen := map[string]bool{}
		for len(seen) < 100 {
			msg, err := f.c.Receive(ctx)
			if err != nil {
				cancel()
				t.Fatalf("%s: received %d of 100: %v", topic, len(seen), err)
			}
			seen[string(msg.Payload())] = true
			f.c.Ack(msg)
		}
		cancel()
	}
	// The client of the moving topic kept its connections to the proxy: only its producer
	// and consumer were closed.
	if n := proxy.count(t, "pulsar_proxy_session_closes_total", `reason="broker_closed"`); n != closesBefore {
		t.Errorf("%v client connections closed as broker_closed, want none (producers and consumers are closed, not connections)", n-closesBefore)
	}
	startBroker2(t)
}
