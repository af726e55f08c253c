package session

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
)

// muxBroker is a unit-test stand-in for a broker (the real proof runs on Pulsar): it
// answers CONNECT, PRODUCER, SEND, SUBSCRIBE, CLOSE_*, and a FLOW with that many MESSAGEs of
// msgSize bytes, and records the connections and what the proxy closed.
type muxBroker struct {
	ln         net.Listener
	msgSize    int
	maxMessage int32 // announced in CONNECTED

	mu        sync.Mutex
	conns     int
	open      []net.Conn
	mute      bool            // answer no PRODUCER (requests stay pending)
	producers map[uint64]bool // live producer ids, as the broker sees them
	closed    []uint64        // producer and consumer ids closed by CLOSE_*
}

func newMuxBroker(t *testing.T, msgSize int) (*muxBroker, lookup.Broker) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &muxBroker{ln: ln, msgSize: msgSize, maxMessage: 5 << 20, producers: map[uint64]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns++
			b.open = append(b.open, c)
			b.mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); b.serve(c) }()
			t.Cleanup(func() { c.Close() })
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return b, lookup.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}
}

func (b *muxBroker) serve(c net.Conn) {
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	var wmu sync.Mutex
	write := func(cmd *pb.BaseCommand, payload []byte) error {
		f, err := mux.Encode(cmd, payload)
		if err != nil {
			return err
		}
		wmu.Lock()
		defer wmu.Unlock()
		_, err = (&net.Buffers{f.Head, f.Payload}).WriteTo(c)
		return err
	}
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return
		}
		cmd, err := frame.Decode(f.Command)
		if err != nil {
			return
		}
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			b.mu.Lock()
			maxMessage := b.maxMessage
			b.mu.Unlock()
			write(frame.Connected("fake-broker", 21, maxMessage), nil)
		case pb.BaseCommand_PRODUCER:
			b.mu.Lock()
			b.producers[cmd.GetProducer().GetProducerId()] = true
			mute := b.mute
			b.mu.Unlock()
			if mute {
				continue
			}
			write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
				RequestId: cmd.GetProducer().RequestId, ProducerName: proto.String("p")}}, nil)
		case pb.BaseCommand_SEND:
			s := cmd.GetSend()
			write(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
				ProducerId: s.ProducerId, SequenceId: s.SequenceId}}, nil)
		case pb.BaseCommand_SUBSCRIBE:
			write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: cmd.GetSubscribe().RequestId}}, nil)
		case pb.BaseCommand_CLOSE_PRODUCER, pb.BaseCommand_CLOSE_CONSUMER:
			id := cmd.GetCloseProducer().GetProducerId() + cmd.GetCloseConsumer().GetConsumerId()
			b.mu.Lock()
			b.closed = append(b.closed, id)
			delete(b.producers, cmd.GetCloseProducer().GetProducerId())
			b.mu.Unlock()
		case pb.BaseCommand_FLOW:
			fl := cmd.GetFlow()
			payload := bytes.Repeat([]byte{'m'}, b.msgSize)
			go func() {
				for range fl.GetMessagePermits() {
					if write(&pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
						ConsumerId: fl.ConsumerId, MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1)}}}, payload) != nil {
						return
					}
				}
			}()
		}
	}
}

// drop closes every connection the broker has, as a broker that goes away does.
func (b *muxBroker) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.open {
		c.Close()
	}
	b.open = nil
}

func (b *muxBroker) state() (conns int, producers int, closed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns, len(b.producers), len(b.closed)
}

func muxConfig(t *testing.T, queue int) (Config, *mux.Metrics) {
	cfg := testConfig()
	m := mux.NewMetrics(prometheus.NewRegistry())
	pool := mux.NewPool(mux.Config{Connector: cfg.Upstream, MaxConnections: 1, ClientQueueBytes: queue, Linger: time.Minute, Logger: zerolog.Nop(), Metrics: m})
	t.Cleanup(pool.Close)
	cfg.Multiplex = pool
	return cfg, m
}

func muxClient(t *testing.T, addr string, b lookup.Broker) *peer {
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.URL) }))
	if got := p.recv(); got.GetConnected().GetServerVersion() != "fake-broker" {
		t.Fatalf("CONNECTED does not reflect the broker's: %v", got)
	}
	return p
}

// TestMultiplexSharesOneBrokerConnection: clients choosing the same ids share one broker
// connection, each gets its own answers back under its own ids, and a client that goes
// away has its producer closed on the broker.
func TestMultiplexSharesOneBrokerConnection(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	cfg, _ := muxConfig(t, 1<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{target})
	var clients []*peer
	for range 5 {
		p := muxClient(t, addr, target)
		p.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
			Topic: proto.String("t"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(7)}})
		if got := p.recv().GetProducerSuccess(); got.GetRequestId() != 7 {
			t.Fatalf("producer answer %v", got)
		}
		clients = append(clients, p)
	}
	for i, p := range clients {
		for seq := range uint64(20) {
			p.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq + uint64(i)*100)}})
		}
	}
	for i, p := range clients {
		for seq := range uint64(20) {
			r := p.recv().GetSendReceipt()
			if r.GetProducerId() != 1 || r.GetSequenceId() != seq+uint64(i)*100 {
				t.Fatalf("client %d got receipt %v, want producer 1 sequence %d", i, r, seq+uint64(i)*100)
			}
		}
	}
	if conns, producers, _ := b.state(); conns != 1 || producers != 5 {
		t.Fatalf("broker saw %d connections and %d producers, want 1 and 5", conns, producers)
	}
	clients[2].c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, producers, closed := b.state(); producers == 4 && closed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gone client's producer was not closed on the broker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	clients[0].send(frame.Ping())
	if got := clients[0].recv().GetType(); got != pb.BaseCommand_PONG {
		t.Fatalf("others affected: %v", got)
	}
}

// TestMultiplexSlowConsumerDisconnected: a client that asks for messages and reads none is
// disconnected once its queue passes the bound, its consumer closed on the broker, while
// another client on the same broker connection goes on.
func TestMultiplexSlowConsumerDisconnected(t *testing.T) {
	b, target := newMuxBroker(t, 64<<10)
	// The bound holds what the fast client's permits allow (200 x 64 KiB) but not the slow
	// one's (1000 x 64 KiB).
	cfg, m := muxConfig(t, 16<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{target})
	slow, fast := muxClient(t, addr, target), muxClient(t, addr, target)
	for _, p := range []*peer{slow, fast} {
		p.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{Topic: proto.String("t"),
			Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(3), RequestId: proto.Uint64(1)}})
		if got := p.recv().GetSuccess(); got.GetRequestId() != 1 {
			t.Fatalf("subscribe answer %v", got)
		}
	}
	if tc, ok := slow.c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10) // its socket holds little; the proxy's queue the rest
	}
	slow.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(1000)}})
	fast.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(200)}})
	for range 200 {
		if got := fast.recv().GetMessage(); got.GetConsumerId() != 3 {
			t.Fatalf("fast consumer got %v", got)
		}
	}
	waitCounter(t, m.SlowConsumerDisconnects(), 1)
	slow.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var err error
	n := 0
	for err == nil {
		_, err = slow.r.ReadFrame() // what reached its socket before the close, then the end
		n++
	}
	t.Logf("slow read %d frames then %v", n, err)
	if isTimeout(err) {
		t.Fatal("the slow client was not disconnected")
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, _, closed := b.state(); closed < 1; _, _, closed = b.state() {
		if time.Now().After(deadline) {
			t.Fatal("the slow client's consumer was not closed on the broker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fast.send(frame.Ping())
	if got := fast.recv().GetType(); got != pb.BaseCommand_PONG {
		t.Fatalf("the fast client was affected: %v", got)
	}
}

// TestMultiplexLostBrokerConnection: when the shared broker connection drops, each client
// has exactly its producers and consumers closed (CLOSE_PRODUCER/CLOSE_CONSUMER with its own
// ids) and its pending requests failed, and its next command goes over a new connection.
func TestMultiplexLostBrokerConnection(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	cfg, _ := muxConfig(t, 1<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{target})
	a, c := muxClient(t, addr, target), muxClient(t, addr, target)
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{Topic: proto.String("t"), ProducerId: proto.Uint64(4), RequestId: proto.Uint64(1)}})
	a.recv()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{Topic: proto.String("t"),
		Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(9), RequestId: proto.Uint64(1)}})
	c.recv()
	b.mu.Lock()
	b.mute = true
	b.mu.Unlock()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{Topic: proto.String("t"), ProducerId: proto.Uint64(5), RequestId: proto.Uint64(77)}})
	time.Sleep(100 * time.Millisecond) // the PRODUCER reached the broker, which does not answer
	b.drop()
	if got := a.recv(); got.GetCloseProducer().GetProducerId() != 4 {
		t.Fatalf("client a got %v, want CLOSE_PRODUCER 4", got)
	}
	got := map[pb.BaseCommand_Type]*pb.BaseCommand{}
	for range 3 { // its consumer, its half-created producer, its pending request
		cmd := c.recv()
		got[cmd.GetType()] = cmd
	}
	if got[pb.BaseCommand_CLOSE_CONSUMER].GetCloseConsumer().GetConsumerId() != 9 ||
		got[pb.BaseCommand_CLOSE_PRODUCER].GetCloseProducer().GetProducerId() != 5 ||
		got[pb.BaseCommand_ERROR].GetError().GetRequestId() != 77 {
		t.Fatalf("client c got %v", got)
	}
	b.mu.Lock()
	b.mute = false
	b.mu.Unlock()
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{Topic: proto.String("t"), ProducerId: proto.Uint64(4), RequestId: proto.Uint64(2)}})
	if got := a.recv().GetProducerSuccess(); got.GetRequestId() != 2 {
		t.Fatalf("recreating the producer: %v", got)
	}
	if conns, _, _ := b.state(); conns != 2 {
		t.Fatalf("broker saw %d connections, want the lost one and a new one", conns)
	}
}

// TestMultiplexPolicy: with authentication and a topic policy, a multiplexed session keys
// its shared connection by the client's role (original_principal), forwards what the policy
// allows and answers what it denies with AuthorizationError for the client's own request id,
// and goes on.
func TestMultiplexPolicy(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	sec, am := testSecurity(t, "", `
rules:
  - {roles: [alice], resources: ["public/default/*"], actions: [lookup, produce]}
`)
	sec.ForwardClientCredentials = false
	cfg, _ := muxConfig(t, 1<<20)
	m := NewMetrics(prometheus.NewRegistry())
	srv := NewServer(cfg, nil, oneTarget{target}, m, zerolog.Nop())
	srv.SetSecurity(sec)
	addr := serveOn(t, srv, nil)
	tok := token(t, testSecret, "alice", time.Hour)
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) { withToken(tok)(c); c.ProxyToBrokerUrl = proto.String(target.URL) }))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v", got)
	}
	producer := func(topic string, id uint64) *pb.BaseCommand {
		return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
			Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)}}
	}
	p.send(producer("persistent://public/secret/t", 2))
	if got := p.recv(); got.GetError().GetError() != pb.ServerError_AuthorizationError || got.GetError().GetRequestId() != 2 {
		t.Fatalf("denied PRODUCER: %v", got)
	}
	p.send(producer("persistent://public/default/t", 1))
	if got := p.recv(); got.GetProducerSuccess().GetRequestId() != 1 {
		t.Fatalf("allowed PRODUCER: %v", got)
	}
	if _, producers, _ := b.state(); producers != 1 {
		t.Fatalf("the broker has %d producers, want the allowed one", producers)
	}
	am.Wait(t, "pulsar_proxy_authorization_denials_total", 1, "action", string(authz.ActionProduce))
	// A command no client may send ends the session.
	p.send(&pb.BaseCommand{Type: pb.BaseCommand_END_TXN_ON_PARTITION.Enum(), EndTxnOnPartition: &pb.CommandEndTxnOnPartition{RequestId: proto.Uint64(5)}})
	if got := p.recv(); got.GetType() != pb.BaseCommand_ERROR {
		t.Fatalf("refused command: %v", got)
	}
	p.expectClosed()
}

// A frame the shared connection's broker would not read (over its max_message_size and the
// padding) ends the sender's session at the proxy: the broker would close the connection,
// and every neighbour's producers with it.
func TestMultiplexFrameOverTheBrokersLimit(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	b.mu.Lock()
	b.maxMessage = 1 << 10
	b.mu.Unlock()
	cfg, _ := muxConfig(t, 1<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{target})
	neighbour, hostile := muxClient(t, addr, target), muxClient(t, addr, target)
	for _, p := range []*peer{neighbour, hostile} {
		p.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
			Topic: proto.String("t"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
		if got := p.recv(); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
			t.Fatalf("producer: %v", got)
		}
	}
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}
	big, err := frame.AppendPayloadCommand(nil, send, nil, &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}, bytes.Repeat([]byte{'x'}, 12<<10))
	if err != nil {
		t.Fatal(err)
	}
	hostile.c.Write(big)
	if got := hostile.recv(); got.GetError().GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("a frame over the broker's limit: %v, want NotAllowedError", got)
	}
	neighbour.send(send)
	if got := neighbour.recv(); got.GetSendReceipt().GetSequenceId() != 1 {
		t.Fatalf("the neighbour's send: %v", got)
	}
	if conns, _, _ := b.state(); conns != 1 {
		t.Fatalf("broker saw %d connections, want the one shared connection", conns)
	}
}
