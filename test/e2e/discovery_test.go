package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// rigPorts are the rig brokers' binary ports, for broker.allowedPorts.
func rigPorts() string {
	var ps []string
	for _, u := range brokerURLs() {
		ps = append(ps, u[strings.LastIndexByte(u, ':')+1:])
	}
	return strings.Join(ps, ", ")
}

// rigWebPorts are the rig brokers' web service ports, for broker.allowedWebPorts.
func rigWebPorts() string {
	var ps []string
	for _, u := range brokerHTTPURLs() {
		ps = append(ps, u[strings.LastIndexByte(u, ':')+1:])
	}
	return strings.Join(ps, ", ")
}

// registerBroker registers rig broker n as an instance of service, with an HTTP health check
// on its admin port, and deregisters it when the test ends.
func registerBroker(t *testing.T, service string, n int) {
	t.Helper()
	b := theRig.Brokers[n-1]
	host, port, err := net.SplitHostPort(strings.TrimPrefix(b.URL, "pulsar://"))
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscan(port, &p)
	id := fmt.Sprintf("%s-broker%d", service, n)
	if err := theRig.RegisterService(testCtx(t), rig.ConsulService{
		Name: service, ID: id, Address: host, Port: p,
		HTTPCheck: b.HTTP + "/admin/v2/brokers/ready", HTTPInterval: time.Second,
	}); err != nil {
		t.Fatalf("register broker %d: %v", n, err)
	}
	t.Cleanup(func() { theRig.DeregisterService(context.Background(), id) })
}

func deregisterBroker(t *testing.T, service string, n int) {
	t.Helper()
	if err := theRig.DeregisterService(testCtx(t), fmt.Sprintf("%s-broker%d", service, n)); err != nil {
		t.Fatal(err)
	}
}

// registerBothBrokers registers the rig's two brokers as service and waits until Consul
// passes both.
func registerBothBrokers(t *testing.T, service string) {
	t.Helper()
	registerBroker(t, service, 1)
	registerBroker(t, service, 2)
	waitPassing(t, service, 2)
}

// waitPassing waits until Consul lists want passing instances of service.
func waitPassing(t *testing.T, service string, want int) {
	t.Helper()
	wait.Until(t, 60*time.Second, fmt.Sprintf("%d passing instances of %s", want, service), func() bool {
		es, err := theRig.HealthService(testCtx(t), service, true)
		return err == nil && len(es) == want
	})
}

// startConsulProxy runs the proxy with Consul as its only discovery provider.
func startConsulProxy(t *testing.T, service, consulAddr string) *proxy {
	t.Helper()
	return startProxy(t, nil, fmt.Sprintf(`discovery:
  healthCheckInterval: 500ms
  consul:
    service: %q
    address: %q
broker:
  allowedPorts: [%s]
`, service, consulAddr, rigPorts()))
}

func (p *proxy) waitReady(t *testing.T) {
	t.Helper()
	wait.Until(t, 60*time.Second, "/readyz to answer 200", func() bool { code, _ := p.get("/readyz"); return code == 200 })
}

// targetAllowed reports whether the proxy accepts a direct-mode CONNECT to broker n.
func targetAllowed(t *testing.T, p *proxy, n int) bool {
	t.Helper()
	resp, conn := rawConnect(t, p.Addr, func(c *pb.CommandConnect) {
		c.ProxyToBrokerUrl = proto.String(brokerAddrs()[n-1])
	})
	conn.Close()
	switch resp.GetType() {
	case pb.BaseCommand_CONNECTED:
		return true
	case pb.BaseCommand_ERROR:
		if !strings.Contains(resp.GetError().GetMessage(), "target broker not allowed") {
			t.Fatalf("CONNECT to broker %d refused for another reason: %v", n, resp)
		}
		return false
	}
	t.Fatalf("CONNECT to broker %d: %v", n, resp)
	return false
}

func lookupFrame(topic string, id uint64) []byte {
	b, err := frame.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(id)}})
	if err != nil {
		panic(err) // a fixed, valid command
	}
	return b
}

// lookupOwner asks the proxy for topic's owner once.
func lookupOwner(t *testing.T, addr, topic string) string {
	t.Helper()
	l := dialLookup(t, addr)
	defer l.conn.Close()
	if _, err := l.conn.Write(lookupFrame(topic, 1)); err != nil {
		t.Fatal(err)
	}
	resp, err := l.read()
	if err != nil {
		t.Fatal(err)
	}
	lr := resp.GetLookupTopicResponse()
	if lr.GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("lookup of %s: %v", topic, resp)
	}
	return lr.GetBrokerServiceUrl()
}

func brokerRequests(t *testing.T, p *proxy, n int) float64 {
	return p.count(t, "pulsar_proxy_broker_lookup_requests_total", fmt.Sprintf(`broker="%s"`, brokerAddrs()[n-1]))
}

// TestDiscoveryConsulFollowsRegistrations: both brokers registered in the rig's Consul agent
// with an HTTP check; the proxy knows them only from Consul.
func TestDiscoveryConsulFollowsRegistrations(t *testing.T) {
	service := rig.UniqueName("pulsar")
	registerBothBrokers(t, service)
	proxy := startConsulProxy(t, service, theRig.ConsulAddr)
	proxy.waitReady(t)
	if !targetAllowed(t, proxy, 1) || !targetAllowed(t, proxy, 2) {
		t.Fatal("a registered broker is refused as a target")
	}

	c := newClient(t, proxy.PulsarURL)
	topic, owners := partitionedTopicOnBothBrokers(t, "consul", 4)
	t.Logf("partition owners: %v", owners)
	consumer := subscribe(t, c, topic, "s", pulsar.Shared)
	producer, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	send := func(from, n int) [][]byte {
		t.Helper()
		out := make([][]byte, n)
		for i := range n {
			out[i] = payloadFor(from + i)
			if _, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: out[i]}); err != nil {
				t.Fatalf("send %d: %v", from+i, err)
			}
		}
		return out
	}
	receive := func(sent [][]byte, from int) {
		t.Helper()
		want := map[int]bool{}
		for i := range sent {
			want[from+i] = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for len(want) > 0 {
			msg, err := consumer.Receive(ctx)
			if err != nil {
				t.Fatalf("%d messages missing: %v", len(want), err)
			}
			consumer.Ack(msg)
			delete(want, indexOf(msg.Payload()))
		}
	}
	receive(send(0, 200), 0)

	// Deregister broker 2: refused as a target, and no more lookups to it, within 5 s.
	deregisterBroker(t, service, 2)
	waited := time.Now()
	wait.Until(t, 5*time.Second, "broker 2 refused as a target", func() bool { return !targetAllowed(t, proxy, 2) })
	took := time.Since(waited)
	t.Logf("broker 2 refused %s after its deregistration", took.Round(10*time.Millisecond))
	if live := proxy.metric(t, "pulsar_proxy_brokers", `state="live"`); live != 1 {
		t.Fatalf("live brokers = %v, want 1", live)
	}
	before := brokerRequests(t, proxy, 2)
	for range 20 {
		lookupOwner(t, proxy.Addr, topic+"-partition-0")
	}
	if after := brokerRequests(t, proxy, 2); after != before {
		t.Fatalf("lookups still sent to deregistered broker 2 (%v → %v)", before, after)
	}

	// Its partitions move to broker 1; the clients keep working through the proxy.
	tn, _ := rig.ParseTopic(topic)
	for i, o := range owners {
		if o == 2 {
			if err := theRig.PlaceTopic(testCtx(t), tn.Partition(i).String(), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	receive(send(200, 200), 200)

	// Registered again: used again, as a target and for lookups.
	registerBroker(t, service, 2)
	wait.Until(t, 30*time.Second, "broker 2 allowed again", func() bool { return targetAllowed(t, proxy, 2) })
	wait.Until(t, 30*time.Second, "broker 2 healthy again", func() bool {
		return proxy.metric(t, "pulsar_proxy_brokers", `state="healthy"`) == 2
	})
	before = brokerRequests(t, proxy, 2)
	for range 20 {
		lookupOwner(t, proxy.Addr, topic+"-partition-0")
	}
	if after := brokerRequests(t, proxy, 2); after <= before {
		t.Fatalf("no lookup sent to re-registered broker 2")
	}
	for i, o := range owners {
		if o == 2 {
			if err := theRig.PlaceTopic(testCtx(t), tn.Partition(i).String(), 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	receive(send(400, 200), 400)
	if n := proxy.metric(t, "pulsar_proxy_broker_sessions_total", fmt.Sprintf(`broker="%s"`, brokerAddrs()[1])); n < 2 {
		t.Fatalf("direct sessions to broker 2 = %v, want one before and one after re-registration", n)
	}
}

// TestDiscoveryConsulOutage stops the rig's Consul agent while messages flow; it starts it
// again before returning.
func TestDiscoveryConsulOutage(t *testing.T) {
	service := rig.UniqueName("pulsar")
	registerBothBrokers(t, service)
	proxy := startConsulProxy(t, service, theRig.ConsulAddr)
	proxy.waitReady(t)

	c := newClient(t, proxy.PulsarURL)
	topic, _ := partitionedTopicOnBothBrokers(t, "outage", 4)
	consumer := subscribe(t, c, topic, "s", pulsar.Shared)
	// A send timeout far beyond any reconnection: a send that still fails was lost.
	producer, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	var mu sync.Mutex
	acked := map[int]bool{}
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // traffic throughout
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: payloadFor(i)})
			mu.Lock()
			if err == nil {
				acked[i] = true
			} else {
				failures = append(failures, fmt.Sprintf("send %d: %v", i, err))
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	stopTraffic := func() { close(stop); wg.Wait() }
	ackedNow := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	consulDown := true
	t.Cleanup(func() {
		if consulDown {
			theRig.StartConsul(context.Background())
		}
	})
	if err := theRig.StopConsul(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 30*time.Second, "discovery marked stale", func() bool {
		return proxy.metric(t, "pulsar_proxy_discovery_stale", `provider="consul"`) == 1
	})
	s1 := proxy.metric(t, "pulsar_proxy_discovery_staleness_seconds", `provider="consul"`)
	base := ackedNow()
	wait.Until(t, 60*time.Second, "messages acknowledged while Consul is down", func() bool { return ackedNow() >= base+100 })
	s2 := proxy.metric(t, "pulsar_proxy_discovery_staleness_seconds", `provider="consul"`)
	if s2 <= s1 {
		t.Fatalf("staleness did not grow: %v then %v", s1, s2)
	}
	if code, body := proxy.get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d while the last known brokers answer: %s", code, body)
	}
	if live := proxy.metric(t, "pulsar_proxy_brokers", `state="live"`); live != 2 {
		t.Fatalf("live brokers = %v during the outage, want the last known 2", live)
	}
	// A new client (new lookups, new direct sessions) works on the last known set.
	c2 := newClient(t, proxy.PulsarURL)
	sent := produce(t, c2, uniqueTopic(t, "during-outage"), 50)
	if errs := proxy.metric(t, "pulsar_proxy_discovery_errors_total", `provider="consul"`); errs < 1 {
		t.Fatalf("discovery errors = %v", errs)
	}
	t.Logf("during the outage: staleness %.1fs → %.1fs, %d sends acknowledged, %d produced by a new client",
		s1, s2, ackedNow()-base, len(sent))

	// Consul returns (a dev agent: empty until the brokers register again).
	if err := theRig.StartConsul(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	consulDown = false
	registerBothBrokers(t, service)
	wait.Until(t, 60*time.Second, "discovery fresh again", func() bool {
		return proxy.metric(t, "pulsar_proxy_discovery_stale", `provider="consul"`) == 0
	})
	if s3 := proxy.metric(t, "pulsar_proxy_discovery_staleness_seconds", `provider="consul"`); s3 >= s2 {
		t.Fatalf("staleness %v after recovery, was %v", s3, s2)
	}
	base = ackedNow()
	wait.Until(t, 60*time.Second, "messages acknowledged after Consul returned", func() bool { return ackedNow() >= base+50 })
	stopTraffic()
	t.Logf("sends: %d acknowledged, %d failed", len(acked), len(failures))
	if len(failures) > 0 {
		t.Fatalf("%d sends failed across the Consul outage, first: %s", len(failures), failures[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for missing := len(acked); missing > 0; {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("%d of %d acknowledged messages never arrived: %v", missing, len(acked), err)
		}
		consumer.Ack(msg)
		if i := indexOf(msg.Payload()); acked[i] {
			acked[i] = false // counted once, whatever the redeliveries
			missing--
		}
	}
}

// tcpForwarder accepts on addr only after start, forwarding to target: a Consul agent that
// "appears" at a fixed address.
type tcpForwarder struct {
	ln     net.Listener
	target string
	header []byte // written to target first on every connection (a load balancer's PROXY header)
	wg     sync.WaitGroup
}

func (f *tcpForwarder) start(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f.serve(t, ln)
}

func (f *tcpForwarder) serve(t *testing.T, ln net.Listener) {
	f.ln = ln
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			if _, err := up.Write(f.header); err != nil {
				c.Close()
				up.Close()
				continue
			}
			f.wg.Add(2)
			go func() { defer f.wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer f.wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close() })
}

// reservedPort is a TCP socket bound to a free port of 127.0.0.1 that does not listen yet:
// the port is ours (no other process can take it, unlike a port found free and closed
// again), and a connection to it is refused, as to an agent that is down, until listen.
type reservedPort struct {
	fd   int
	addr string
}

func reservePort(t *testing.T) *reservedPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	r := &reservedPort{fd: fd}
	t.Cleanup(func() {
		if r.fd >= 0 {
			syscall.Close(r.fd)
		}
	})
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	r.addr = fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	return r
}

// listen starts listening on the reserved port.
func (r *reservedPort) listen(t *testing.T) net.Listener {
	t.Helper()
	if err := syscall.Listen(r.fd, 128); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(r.fd), r.addr)
	r.fd = -1 // f owns it now
	defer f.Close()
	ln, err := net.FileListener(f) // a duplicate of the descriptor
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestDiscoveryConsulUnreachableAtStart(t *testing.T) {
	service := rig.UniqueName("pulsar")
	registerBroker(t, service, 1)
	// A malformed instance next to the good one: skipped with a warning.
	if err := theRig.RegisterService(testCtx(t), rig.ConsulService{Name: service, ID: service + "-bad", Address: "not a host!/x", Port: 6650}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { theRig.DeregisterService(context.Background(), service+"-bad") })

	consul := reservePort(t) // refuses connections until it listens
	proxy := startConsulProxy(t, service, consul.addr)
	wait.Until(t, 30*time.Second, "discovery errors counted", func() bool {
		return proxy.metric(t, "pulsar_proxy_discovery_errors_total", `provider="consul"`) >= 1
	})
	code, body := proxy.get("/readyz")
	if code != 503 || !strings.Contains(body, "consul") {
		t.Fatalf("/readyz = %d %q, want 503 naming consul", code, body)
	}
	t.Logf("/readyz while Consul is unreachable: %d %s", code, strings.TrimSpace(body))
	// Lookups fail with a retryable error meanwhile.
	l := dialLookup(t, proxy.Addr)
	l.conn.Write(lookupFrame("persistent://public/default/x", 1))
	resp, err := l.read()
	if err != nil || resp.GetLookupTopicResponse().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("lookup without brokers: %v %v", resp, err)
	}

	fwd := &tcpForwarder{target: theRig.ConsulAddr}
	fwd.serve(t, consul.listen(t))
	proxy.waitReady(t)
	if live := proxy.metric(t, "pulsar_proxy_brokers", `state="live"`); live != 1 {
		t.Fatalf("live brokers = %v, want 1 (the malformed instance skipped)", live)
	}
	if !strings.Contains(proxyLog(t, proxy), "skipping a Consul instance") {
		t.Fatal("no warning about the malformed instance")
	}
	c := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "after-consul")
	if err := theRig.PlaceTopic(testCtx(t), topic, 1); err != nil {
		t.Fatal(err)
	}
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	consumeAll(t, consumer, produce(t, c, topic, 100))
}

func proxyLog(t *testing.T, p *proxy) string { t.Helper(); return p.LogTail(100000) }

func TestDiscoveryBadConfigRefusedAtStart(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"no provider": {"log: {level: info}\n", "discovery: no broker discovery configured"},
		"bad DNS name": {"discovery:\n  dns:\n    name: \"broker pulsar!\"\n",
			`discovery.dns.name: "broker pulsar!" is not a DNS name`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := proxyproc.Start(proxyBinary, t.TempDir(), nil, tc.yaml)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start: %v, want an exit naming %q", err, tc.want)
			}
		})
	}
}

// TestDiscoveryCoalescesLookups sends 1000 identical LOOKUPs at once on 50 connections.
func TestDiscoveryCoalescesLookups(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	proxy.waitReady(t)
	// A topic in a fresh namespace: its bundle has no owner yet, the thundering-herd case
	// (every client of a topic looking it up at once after its broker went away).
	ns := "public/" + rig.UniqueName("herd")
	if err := theRig.CreateNamespace(testCtx(t), ns, 1); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://" + ns + "/t"
	owned := uniqueTopic(t, "owned")
	if err := theRig.PlaceTopic(testCtx(t), owned, 2); err != nil {
		t.Fatal(err)
	}

	herd := func(topic string) (brokerReqs, coalesced float64, answers map[string]int) {
		t.Helper()
		reqBefore := proxy.count(t, "pulsar_proxy_broker_lookup_requests_total", `type="LOOKUP"`)
		coBefore := proxy.count(t, "pulsar_proxy_lookups_coalesced_total", `type="LOOKUP"`)
		const conns, perConn = 50, 20
		var ready, done sync.WaitGroup
		gate := make(chan struct{})
		var mu sync.Mutex
		answers = map[string]int{}
		for range conns {
			l := dialLookup(t, proxy.Addr)
			var batch []byte
			for i := range perConn {
				batch = append(batch, lookupFrame(topic, uint64(i+1))...)
			}
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-gate
				if _, err := l.conn.Write(batch); err != nil {
					t.Error(err)
					return
				}
				seen := map[uint64]bool{}
				for range perConn {
					resp, err := l.read()
					if err != nil {
						t.Error(err)
						return
					}
					lr := resp.GetLookupTopicResponse()
					if seen[lr.GetRequestId()] || lr.GetRequestId() < 1 || lr.GetRequestId() > perConn {
						t.Errorf("request id %d answered twice or unknown", lr.GetRequestId())
					}
					seen[lr.GetRequestId()] = true
					key := lr.GetResponse().String() + " " + lr.GetBrokerServiceUrl()
					if !lr.GetProxyThroughServiceUrl() {
						key += " (not through proxy)"
					}
					mu.Lock()
					answers[key]++
					mu.Unlock()
				}
			}()
		}
		ready.Wait()
		close(gate)
		done.Wait()
		return proxy.count(t, "pulsar_proxy_broker_lookup_requests_total", `type="LOOKUP"`) - reqBefore,
			proxy.count(t, "pulsar_proxy_lookups_coalesced_total", `type="LOOKUP"`) - coBefore, answers
	}

	reqs, co, answers := herd(topic)
	owner, err := theRig.TopicOwner(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	want := "Connect " + owner.URL
	if len(answers) != 1 || answers[want] != 1000 {
		t.Fatalf("answers %v, want all 1000 %q", answers, want)
	}
	t.Logf("unowned bundle: 1000 identical lookups → %v broker requests, %v coalesced", reqs, co)
	if reqs > 5 {
		t.Fatalf("1000 identical lookups reached the brokers as %v requests, want at most a handful", reqs)
	}

	// An owned topic answers in about a millisecond, so fewer requests overlap; reported, not
	// asserted beyond the answers being right.
	reqs, co, answers = herd(owned)
	want = "Connect " + theRig.Brokers[1].URL
	if len(answers) != 1 || answers[want] != 1000 {
		t.Fatalf("answers %v, want all 1000 %q", answers, want)
	}
	t.Logf("owned topic: 1000 identical lookups → %v broker requests, %v coalesced", reqs, co)
}
