package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// newClient is a pulsar-client-go client whose service URL is the proxy.
func newClient(t *testing.T, serviceURL string) pulsar.Client {
	t.Helper()
	return newClientWith(t, pulsar.ClientOptions{URL: serviceURL})
}

// newTLSClient is newClient over pulsar+ssl://, trusting caFile and checking the host name;
// auth may be nil.
func newTLSClient(t *testing.T, serviceURL, caFile string, auth pulsar.Authentication) pulsar.Client {
	t.Helper()
	return newClientWith(t, pulsar.ClientOptions{URL: serviceURL, TLSTrustCertsFilePath: caFile, TLSValidateHostname: true,
		Authentication: auth})
}

// newClientWith creates a client with o, the tests' timeouts and no logging, closed when the
// test ends.
func newClientWith(t *testing.T, o pulsar.ClientOptions) pulsar.Client {
	t.Helper()
	o.OperationTimeout, o.ConnectionTimeout, o.Logger = 60*time.Second, 10*time.Second, plog.DefaultNopLogger()
	c, err := pulsar.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// payloadFor makes a distinct payload of varying size for message i.
func payloadFor(i int) []byte {
	p := make([]byte, 16+i%700)
	rand.Read(p)
	copy(p, fmt.Sprintf("%08d", i))
	return p
}

func indexOf(p []byte) int {
	var i int
	fmt.Sscanf(string(p[:8]), "%08d", &i)
	return i
}

// produce sends n messages asynchronously and waits until all are acknowledged.
func produce(t *testing.T, c pulsar.Client, topic string, n int) [][]byte {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer p.Close()
	sent := make([][]byte, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		sent[i] = payloadFor(i)
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: sent[i]}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("send: %v", firstErr)
	}
	return sent
}

// consumeAll receives until want messages arrived, checking order within each partition.
func consumeAll(t *testing.T, consumer pulsar.Consumer, sent [][]byte) {
	t.Helper()
	got := make(map[int]bool, len(sent))
	last := map[int32]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for len(got) < len(sent) {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d of %d: %v", len(got), len(sent), err)
		}
		consumer.Ack(msg)
		i := indexOf(msg.Payload())
		if i < 0 || i >= len(sent) || !bytes.Equal(msg.Payload(), sent[i]) {
			t.Fatalf("message %d: payload differs from what was sent", i)
		}
		part := msg.ID().PartitionIdx()
		if prev, ok := last[part]; ok && i <= prev {
			t.Fatalf("partition %d: message %d after %d, order lost", part, i, prev)
		}
		last[part] = i
		got[i] = true
	}
}

func subscribe(t *testing.T, c pulsar.Client, topic, sub string, typ pulsar.SubscriptionType) pulsar.Consumer {
	t.Helper()
	consumer, err := c.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe %s: %v", sub, err)
	}
	t.Cleanup(consumer.Close)
	return consumer
}

func TestGatewayNonPartitionedTopic(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "np")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	sent := produce(t, c, topic, 10000)
	consumeAll(t, consumer, sent)
	if n := proxy.metric(t, "pulsar_proxy_lookups_total", `type="LOOKUP"`, `result="ok"`); n < 1 {
		t.Errorf("no successful LOOKUP counted")
	}

	// The broker sees the client's own version, passed on in the proxy's CONNECT; over a
	// multiplexed connection (E2E_MULTIPLEX) it sees the proxy's, whose CONNECT that was.
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	stats, err := theRig.TopicStats(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	want := "Go"
	if multiplexed() {
		want = "pulsar-proxy"
	}
	if len(stats.Publishers) != 1 || !strings.Contains(stats.Publishers[0].ClientVersion, want) {
		t.Errorf("broker's view of the producer: %+v, want a client version with %q", stats.Publishers, want)
	}
}

func TestGatewayPartitionedTopicOnBothBrokers(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	topic, owners := partitionedTopicOnBothBrokers(t, "part", 4)
	t.Logf("partition owners: %v", owners)

	c := newClient(t, proxy.PulsarURL)
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	sent := produce(t, c, topic, 10000)
	consumeAll(t, consumer, sent)

	for _, b := range brokerAddrs() {
		if n := proxy.metric(t, "pulsar_proxy_broker_sessions_total", fmt.Sprintf(`broker=%q`, b)); n < 1 {
			t.Errorf("no direct session to broker %s in the proxy's metrics", b)
		}
	}
	in := proxy.metric(t, "pulsar_proxy_bytes_total", `direction="client_to_broker"`)
	out := proxy.metric(t, "pulsar_proxy_bytes_total", `direction="broker_to_client"`)
	if in < 10000*16 || out < 10000*16 {
		t.Errorf("bytes forwarded: in=%v out=%v, want both above the payload total", in, out)
	}
}

// TestGatewayTopicUnloadLosesNoAckedMessage unloads the topic while a producer sends through
// the proxy: the client finds the topic again through the proxy, every send succeeds (the
// client retries across the unload within its send timeout), and every message arrives.
func TestGatewayTopicUnloadLosesNoAckedMessage(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "unload")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	// The send timeout covers the unload, the new lookup and the reconnection many times over;
	// a send that still fails is a message the proxy lost.
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	const n = 3000
	var mu sync.Mutex
	sent := make([][]byte, n)
	var failures []string
	var wg sync.WaitGroup
	var lookupsBefore float64
	for i := range n {
		if i == n/3 {
			lookupsBefore = proxy.metric(t, "pulsar_proxy_lookups_total", `type="LOOKUP"`)
			unloadTopic(t, topic)
		}
		sent[i] = payloadFor(i)
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: sent[i]}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("send %d: %v", i, err))
				mu.Unlock()
			}
		})
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond) // keep sending across the unload
		}
	}
	if err := p.Flush(); err != nil {
		t.Errorf("flush: %v", err)
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d sends failed across the unload, first: %s", len(failures), n, failures[0])
	}
	// The client found the topic again through the proxy after the unload.
	if after := proxy.metric(t, "pulsar_proxy_lookups_total", `type="LOOKUP"`); after <= lookupsBefore {
		t.Errorf("no LOOKUP through the proxy after the unload (%v before, %v after)", lookupsBefore, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := map[int]bool{}
	for len(seen) < n {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("%d of %d acknowledged messages never arrived: %v", n-len(seen), n, err)
		}
		consumer.Ack(msg)
		i := indexOf(msg.Payload())
		if i < 0 || i >= n || !bytes.Equal(sent[i], msg.Payload()) {
			t.Fatalf("message %d changed", i)
		}
		seen[i] = true
	}
}

func TestGatewaySubscriptionTypes(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	for name, typ := range map[string]pulsar.SubscriptionType{"Shared": pulsar.Shared, "Failover": pulsar.Failover, "Key_Shared": pulsar.KeyShared} {
		t.Run(name, func(t *testing.T) {
			topic := uniqueTopic(t, "subs")
			c1 := subscribe(t, c, topic, "s", typ)
			c2 := subscribe(t, c, topic, "s", typ)
			p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatcherBuilderType: pulsar.KeyBasedBatchBuilder})
			if err != nil {
				t.Fatal(err)
			}
			const n = 400
			for i := range n {
				if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: payloadFor(i), Key: fmt.Sprintf("k%d", i%10)}); err != nil {
					t.Fatal(err)
				}
			}
			p.Close()

			var mu sync.Mutex
			byConsumer := map[int]map[int]bool{0: {}, 1: {}}
			keyOwner := map[string]int{}
			total := 0
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			for ci, cons := range []pulsar.Consumer{c1, c2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						msg, err := cons.Receive(ctx)
						if err != nil {
							return
						}
						cons.Ack(msg)
						mu.Lock()
						byConsumer[ci][indexOf(msg.Payload())] = true
						if owner, ok := keyOwner[msg.Key()]; ok && owner != ci && typ == pulsar.KeyShared {
							t.Errorf("key %s delivered to both consumers", msg.Key())
						}
						keyOwner[msg.Key()] = ci
						total++
						done := len(byConsumer[0])+len(byConsumer[1]) >= n
						mu.Unlock()
						if done {
							cancel()
						}
					}
				}()
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			union := map[int]bool{}
			for _, m := range byConsumer {
				for i := range m {
					union[i] = true
				}
			}
			if len(union) != n {
				t.Fatalf("received %d distinct of %d", len(union), n)
			}
			switch typ {
			case pulsar.Failover:
				if len(byConsumer[0]) != 0 && len(byConsumer[1]) != 0 {
					t.Errorf("failover delivered to both consumers: %d and %d", len(byConsumer[0]), len(byConsumer[1]))
				}
			case pulsar.Shared, pulsar.KeyShared:
				if len(byConsumer[0])+len(byConsumer[1]) != n {
					t.Errorf("a message went to both consumers")
				}
			}
			t.Logf("consumer split: %d / %d", len(byConsumer[0]), len(byConsumer[1]))
		})
	}
	t.Run("ReaderFromEarliest", func(t *testing.T) {
		topic := uniqueTopic(t, "reader")
		sent := produce(t, c, topic, 500)
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range sent {
			msg, err := r.Next(ctx)
			if err != nil {
				t.Fatalf("reader stopped at %d: %v", i, err)
			}
			if !bytes.Equal(msg.Payload(), sent[i]) {
				t.Fatalf("reader message %d differs", i)
			}
		}
	})
}

// rawConnect dials the proxy and sends one CONNECT, returning the answer.
func rawConnect(t *testing.T, addr string, mut func(*pb.CommandConnect)) (*pb.BaseCommand, net.Conn) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	c := &pb.CommandConnect{ClientVersion: proto.String("e2e-raw"), ProtocolVersion: proto.Int32(21)}
	mut(c)
	if err := frame.WriteCommand(conn, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: c}); err != nil {
		t.Fatal(err)
	}
	f, err := frame.NewReader(conn, 0).ReadFrame()
	if err != nil {
		t.Fatalf("no answer to CONNECT: %v", err)
	}
	resp, err := frame.Decode(f.Command)
	if err != nil {
		t.Fatal(err)
	}
	return resp, conn
}

func expectClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := conn.Read(b[:]); err == nil {
		t.Fatalf("connection still open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection neither closed nor answered")
	}
}

// TestGatewayRefusals: forged proxy-only CONNECT fields are refused, and so is every direct
// target that is not a broker discovery knows: on a port outside broker.allowedPorts (the
// rig's broker ports here), and on an allowed port but at an address no broker has. Decoys
// listen on two of the refused targets; neither may see a connection.
func TestGatewayRefusals(t *testing.T) {
	var hits sync.WaitGroup
	decoyHit := make(chan string, 10)
	decoy := func(addr string) net.Listener {
		t.Helper()
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("decoy on %s: %v", addr, err)
		}
		t.Cleanup(func() { ln.Close() })
		hits.Add(1)
		go func() {
			defer hits.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				decoyHit <- ln.Addr().String() + " from " + c.RemoteAddr().String()
				c.Close()
			}
		}()
		return ln
	}
	otherPort := decoy("127.0.0.1:0")
	// An allowed port (broker 1's) on another loopback address: the rig's brokers bind
	// 127.0.0.1 only, so this is a listener that looks like a broker and is none.
	_, brokerPort, err := net.SplitHostPort(brokerAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	lookalike := decoy(net.JoinHostPort("127.0.0.2", brokerPort))
	proxy := startProxy(t, brokerURLs(), "")

	for name, mut := range map[string]func(*pb.CommandConnect){
		"proxy_version":      func(c *pb.CommandConnect) { c.ProxyVersion = proto.String("forged") },
		"original_principal": func(c *pb.CommandConnect) { c.OriginalPrincipal = proto.String("superuser") },
	} {
		resp, conn := rawConnect(t, proxy.Addr, mut)
		if resp.GetType() != pb.BaseCommand_ERROR || resp.GetError().GetError() != pb.ServerError_NotAllowedError {
			t.Errorf("%s: got %v, want ERROR NotAllowedError", name, resp)
		}
		expectClosed(t, conn)
	}

	brokerHTTPHostPort := hostPort(t, brokerHTTPURLs()[0])
	refusals := []struct{ target, why string }{
		{"127.0.0.1:22", "is not an allowed broker port"},
		{brokerHTTPHostPort, "is not an allowed broker port"},
		{"unknown-host.invalid:6650", "is not an allowed broker port"},
		{otherPort.Addr().String(), "is not an allowed broker port"},
		// Allowed ports: only the known-broker rule refuses these.
		{lookalike.Addr().String(), "is not a known broker"},
		{net.JoinHostPort("broker-3.invalid", brokerPort), "is not a known broker"},
	}
	for _, r := range refusals {
		resp, conn := rawConnect(t, proxy.Addr, func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(r.target) })
		msg := resp.GetError().GetMessage()
		if resp.GetType() != pb.BaseCommand_ERROR || resp.GetError().GetError() != pb.ServerError_ServiceNotReady ||
			!strings.Contains(msg, "target broker not allowed") || !strings.Contains(msg, r.why) {
			t.Errorf("target %s: got %v, want ERROR ServiceNotReady \"target broker not allowed: … %s\"", r.target, resp, r.why)
		}
		expectClosed(t, conn)
	}
	// The session counts its failure as it ends, which may be just after the client saw the
	// close: the count is waited for (and must not go past it).
	refused := func() float64 {
		return proxy.metric(t, "pulsar_proxy_handshake_failures_total", `reason="target_not_allowed"`)
	}
	wait.Within(10*time.Second, func() bool { return refused() >= float64(len(refusals)) })
	if n := refused(); n != float64(len(refusals)) {
		t.Errorf("handshake failures for refused targets = %v, want %d", n, len(refusals))
	}
	otherPort.Close()
	lookalike.Close()
	hits.Wait()
	select {
	case hit := <-decoyHit:
		t.Fatalf("a decoy got a connection (%s): the proxy dialled a refused target", hit)
	default:
	}
}

func TestGatewayBadBytesCloseOnlyThatConnection(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "session:\n  handshakeTimeout: 1s\n")
	c := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "healthy")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	producer, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	roundTrip := func(i int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Payload: payloadFor(i)}); err != nil {
			t.Fatalf("healthy session send %d: %v", i, err)
		}
		msg, err := consumer.Receive(ctx)
		if err != nil || indexOf(msg.Payload()) != i {
			t.Fatalf("healthy session receive %d: %v", i, err)
		}
		consumer.Ack(msg)
	}
	roundTrip(0)

	hdr := func(total, cmd uint32) []byte {
		return []byte{byte(total >> 24), byte(total >> 16), byte(total >> 8), byte(total),
			byte(cmd >> 24), byte(cmd >> 16), byte(cmd >> 8), byte(cmd)}
	}
	garbage := make([]byte, 4096)
	rand.Read(garbage)
	cases := []struct {
		name      string
		bytes     []byte
		halfClose bool
	}{
		{"random garbage", garbage, false},
		{"totalSize 0xFFFFFFFF", hdr(0xFFFFFFFF, 10), false},
		{"totalSize 0", hdr(0, 0), false},
		{"truncated then EOF", append(hdr(200, 196), 0x08, 0x02, 0x12), true},
		{"not protobuf", append(hdr(10, 6), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), false},
		{"stalls mid-frame", append(hdr(200, 196), 0x08, 0x02), false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", proxy.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(tc.bytes)
			if tc.halfClose {
				conn.(*net.TCPConn).CloseWrite()
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			f, err := frame.NewReader(conn, 0).ReadFrame()
			if err == nil {
				cmd, _ := frame.Decode(f.Command)
				if cmd.GetType() != pb.BaseCommand_ERROR {
					t.Fatalf("answered with %v, want ERROR or close", cmd.GetType())
				}
				t.Logf("ERROR %v: %s", cmd.GetError().GetError(), cmd.GetError().GetMessage())
				expectClosed(t, conn)
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("proxy neither answered nor closed")
			}
			if code, body := proxy.get("/readyz"); code != 200 {
				t.Fatalf("/readyz = %d %s after bad bytes", code, body)
			}
			roundTrip(i + 1)
		})
	}
	if n := proxy.metric(t, "pulsar_proxy_handshake_failures_total", `reason="handshake_timeout"`); n < 1 {
		t.Errorf("the stalled frame was not closed by the handshake timeout")
	}
}

// TestGatewayReadyzFollowsBroker stops a broker of the shared rig, so it restores it before
// returning.
func TestGatewayReadyzFollowsBroker(t *testing.T) {
	only := brokerURLs()[1]
	proxy := startProxy(t, []string{only}, "")
	waitStatus := func(want int) {
		t.Helper()
		var code int
		var body string
		if !wait.Within(60*time.Second, func() bool {
			code, body = proxy.get("/readyz")
			return code == want
		}) {
			t.Fatalf("/readyz stayed %d (%s), want %d", code, body, want)
		}
		t.Logf("/readyz %d: %s", code, body)
	}
	waitStatus(200)
	stopBroker2(t)
	waitStatus(503)
	startBroker2(t)
	waitStatus(200)
}

func hostPort(t *testing.T, httpURL string) string {
	t.Helper()
	var host string
	if _, err := fmt.Sscanf(httpURL, "http://%s", &host); err != nil {
		t.Fatal(err)
	}
	return host
}

// TestGatewayPatternSubscription: a consumer subscribed by regular expression through the
// proxy finds topics that exist when it subscribes and topics created later (the client polls
// GET_TOPICS_OF_NAMESPACE, which the proxy answers in lookup mode), and receives from all.
func TestGatewayPatternSubscription(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	prefix := uniqueTopic(t, "pattern")
	existing := prefix + "-a"
	if err := theRig.CreateTopic(testCtx(t), existing); err != nil {
		t.Fatal(err)
	}
	consumer, err := c.Subscribe(pulsar.ConsumerOptions{
		TopicsPattern: prefix + "-.*", SubscriptionName: "s", AutoDiscoveryPeriod: time.Second,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Close)
	later := prefix + "-b"
	if err := theRig.CreateTopic(testCtx(t), later); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few discovery rounds
	want := map[string]bool{}
	for _, topic := range []string{existing, later} {
		for i := range 5 {
			want[fmt.Sprintf("%s/%d", topic, i)] = true
		}
	}
	for _, topic := range []string{existing, later} {
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s/%d", topic, i))}); err != nil {
				t.Fatal(err)
			}
		}
		p.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(want) > 0 {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("still waiting for %v: %v", want, err)
		}
		delete(want, string(msg.Payload()))
		consumer.Ack(msg)
	}
}
