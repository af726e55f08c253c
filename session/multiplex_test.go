package session

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
)

// muxBroker is a unit-test stand-in for a broker (the real proof runs on Pulsar): it
// answers CONNECT, PRODUCER, SEND, SUBSCRIBE, CLOSE_*, and a FLOW with that many MESSAGEs of
// msgSize bytes, and records the connections and what the proxy closed. Like Pulsar's
// ServerCnx it keeps the producers and consumers of each connection, pending until it
// answers their creation, and closes the whole connection on what Pulsar closes it on: a
// command that does not decode strictly (required fields) or lacks its own sub-message, a
// command no client sends, a SEND for a producer that is not ready, CONSUMER_STATS for a
// consumer it does not have (Pulsar fails on it). A topic named "refused..." is refused
// (ERROR), one named "pending..." is never answered.
type muxBroker struct {
	ln         net.Listener
	msgSize    int
	maxMessage int32 // announced in CONNECTED

	mu        sync.Mutex
	conns     int
	open      []net.Conn
	mute      bool            // answer no PRODUCER (requests stay pending)
	producers map[uint64]bool // live producer ids, as the broker sees them
	closed    int             // producers and consumers closed by CLOSE_*
	got       map[pb.BaseCommand_Type]int
	kills     []string // why the broker closed a connection, as Pulsar would have
}

func newMuxBroker(t testing.TB, msgSize int) (*muxBroker, brokers.Broker) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &muxBroker{ln: ln, msgSize: msgSize, maxMessage: 5 << 20, producers: map[uint64]bool{}, got: map[pb.BaseCommand_Type]int{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); b.drop(); wg.Wait() })
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
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return b, brokers.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}
}

// brokerConn is one connection's state on the muxBroker: its producers and consumers by
// id, true once ready.
type brokerConn struct {
	b         *muxBroker
	c         net.Conn
	wmu       sync.Mutex
	producers map[uint64]bool
	consumers map[uint64]bool
}

func (bc *brokerConn) write(cmd *pb.BaseCommand, payload []byte) error {
	f, err := mux.Encode(cmd, payload)
	if err != nil {
		return err
	}
	bc.wmu.Lock()
	defer bc.wmu.Unlock()
	_, err = (&net.Buffers{f.Head, f.Payload}).WriteTo(bc.c)
	return err
}

func (b *muxBroker) serve(c net.Conn) {
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	bc := &brokerConn{b: b, c: c, producers: map[uint64]bool{}, consumers: map[uint64]bool{}}
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return
		}
		cmd, err := frame.Decode(f.Command)
		if err == nil {
			if _, ok := subMessageOf(cmd); !ok { // Pulsar's decoder checks it first
				err = errors.New(cmd.GetType().String() + " without its command")
			} else {
				err = bc.handle(cmd, f.Payload)
			}
		}
		if err != nil {
			b.mu.Lock()
			b.kills = append(b.kills, err.Error())
			b.mu.Unlock()
			return
		}
	}
}

// handle serves one command; an error closes the connection.
func (bc *brokerConn) handle(cmd *pb.BaseCommand, payload []byte) error {
	b := bc.b
	b.mu.Lock()
	b.got[cmd.GetType()]++
	b.mu.Unlock()
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		b.mu.Lock()
		maxMessage := b.maxMessage
		b.mu.Unlock()
		bc.write(frame.Connected("fake-broker", 21, maxMessage), nil)
	case pb.BaseCommand_PING:
		bc.write(frame.Pong(), nil)
	case pb.BaseCommand_PONG, pb.BaseCommand_AUTH_RESPONSE, pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
	case pb.BaseCommand_PRODUCER, pb.BaseCommand_SUBSCRIBE:
		bc.create(cmd)
	case pb.BaseCommand_SEND:
		return bc.send(cmd.GetSend(), payload)
	case pb.BaseCommand_CLOSE_PRODUCER, pb.BaseCommand_CLOSE_CONSUMER:
		bc.close(cmd)
	case pb.BaseCommand_FLOW, pb.BaseCommand_ACK, pb.BaseCommand_CONSUMER_STATS, pb.BaseCommand_UNSUBSCRIBE,
		pb.BaseCommand_SEEK, pb.BaseCommand_GET_LAST_MESSAGE_ID:
		return bc.consumerCommand(cmd)
	case pb.BaseCommand_WATCH_TOPIC_LIST:
		w := cmd.GetWatchTopicList()
		bc.write(&pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS.Enum(), WatchTopicListSuccess: &pb.CommandWatchTopicListSuccess{
			RequestId: w.RequestId, WatcherId: w.WatcherId, TopicsHash: proto.String(edge.TopicsHash(nil))}}, nil)
	case pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
		bc.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: cmd.GetWatchTopicListClose().RequestId}}, nil)
	case pb.BaseCommand_LOOKUP:
		bc.write(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: cmd.GetLookupTopic().RequestId, Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String("pulsar://fake-broker:6650"), Authoritative: proto.Bool(true)}}, nil)
	default:
		id, ok := frame.RequestID(cmd)
		if !ok || edge.Refused(cmd.GetType()) {
			return errors.New(cmd.GetType().String() + ": not a command a broker serves")
		}
		bc.write(frame.Error(id, pb.ServerError_NotAllowedError, "fake broker: not served"), nil)
	}
	return nil
}

// create answers PRODUCER and SUBSCRIBE as ServerCnx does, the topic's name choosing the
// outcome; a repeat while the first is under way is refused, one after it succeeded answered
// as it was.
func (bc *brokerConn) create(cmd *pb.BaseCommand) {
	ids, id, req, topic := bc.producers, cmd.GetProducer().GetProducerId(), cmd.GetProducer().GetRequestId(), cmd.GetProducer().GetTopic()
	ok := &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{RequestId: proto.Uint64(req), ProducerName: proto.String("p")}}
	if s := cmd.GetSubscribe(); s != nil {
		ids, id, req, topic = bc.consumers, s.GetConsumerId(), s.GetRequestId(), s.GetTopic()
		ok = &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(req)}}
	}
	ready, known := ids[id]
	switch {
	case known && ready:
		bc.write(ok, nil)
	case known:
		bc.write(frame.Error(req, pb.ServerError_ServiceNotReady, "already present on the connection"), nil)
	case strings.HasPrefix(topic, "refused"):
		bc.write(frame.Error(req, pb.ServerError_AuthorizationError, "refused"), nil)
	default:
		bc.b.mu.Lock()
		mute := strings.HasPrefix(topic, "pending") || (cmd.GetProducer() != nil && bc.b.mute)
		if cmd.GetProducer() != nil {
			bc.b.producers[id] = true
		}
		bc.b.mu.Unlock()
		ids[id] = !mute
		if !mute {
			bc.write(ok, nil)
		}
	}
}

// send takes a SEND: Pulsar closes the connection when its producer is not ready.
func (bc *brokerConn) send(s *pb.CommandSend, payload []byte) error {
	if !bc.producers[s.GetProducerId()] {
		return fmt.Errorf("SEND for producer %d, which is not ready", s.GetProducerId())
	}
	if _, err := frame.ParsePayload(payload); err != nil && errors.Is(err, frame.ErrBadChecksum) {
		return bc.write(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: s.ProducerId, SequenceId: s.SequenceId, Error: pb.ServerError_ChecksumError.Enum(), Message: proto.String("checksum")}}, nil)
	}
	bc.write(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: s.ProducerId, SequenceId: s.SequenceId}}, nil)
	return nil
}

func (bc *brokerConn) close(cmd *pb.BaseCommand) {
	p, c := cmd.GetCloseProducer(), cmd.GetCloseConsumer()
	bc.b.mu.Lock()
	bc.b.closed++
	if p != nil {
		delete(bc.b.producers, p.GetProducerId())
		delete(bc.producers, p.GetProducerId())
	} else {
		delete(bc.consumers, c.GetConsumerId())
	}
	bc.b.mu.Unlock()
	id, _ := frame.RequestID(cmd)
	bc.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(id)}}, nil)
}

// consumerCommand serves the commands that use a consumer, as ServerCnx does for one that is
// ready, one whose creation is under way, and one it does not have.
func (bc *brokerConn) consumerCommand(cmd *pb.BaseCommand) error {
	sub, _ := subMessageOf(cmd)
	id := sub.Get(sub.Descriptor().Fields().ByName("consumer_id")).Uint()
	req, hasReq := frame.RequestID(cmd)
	ready, known := bc.consumers[id]
	switch {
	case cmd.GetType() == pb.BaseCommand_CONSUMER_STATS && !known:
		return fmt.Errorf("CONSUMER_STATS for consumer %d, which it does not have", id)
	case cmd.GetType() == pb.BaseCommand_CONSUMER_STATS:
		r := &pb.CommandConsumerStatsResponse{RequestId: proto.Uint64(req)}
		if !ready {
			r.ErrorCode, r.ErrorMessage = pb.ServerError_ConsumerNotFound.Enum(), proto.String("Consumer not found")
		}
		return bc.write(&pb.BaseCommand{Type: pb.BaseCommand_CONSUMER_STATS_RESPONSE.Enum(), ConsumerStatsResponse: r}, nil)
	case !ready && cmd.GetType() != pb.BaseCommand_FLOW && cmd.GetType() != pb.BaseCommand_ACK:
		return bc.write(frame.Error(req, pb.ServerError_MetadataError, "Consumer not found"), nil)
	case !ready:
		return nil // FLOW and ACK for a consumer that is not ready: dropped
	case cmd.GetType() == pb.BaseCommand_FLOW:
		bc.flow(cmd.GetFlow())
	case cmd.GetType() == pb.BaseCommand_ACK && hasReq:
		return bc.write(&pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: &pb.CommandAckResponse{ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(req)}}, nil)
	case cmd.GetType() == pb.BaseCommand_GET_LAST_MESSAGE_ID:
		return bc.write(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: &pb.CommandGetLastMessageIdResponse{
			RequestId: proto.Uint64(req), LastMessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1)}}}, nil)
	case hasReq && cmd.GetType() != pb.BaseCommand_ACK:
		return bc.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(req)}}, nil)
	}
	return nil
}

// flow sends as many MESSAGEs as the FLOW permits (a thousand at most), from a goroutine of
// its own.
func (bc *brokerConn) flow(fl *pb.CommandFlow) {
	payload := bytes.Repeat([]byte{'m'}, bc.b.msgSize)
	go func() {
		for range min(fl.GetMessagePermits(), 1000) {
			if bc.write(&pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
				ConsumerId: fl.ConsumerId, MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1)}}}, payload) != nil {
				return
			}
		}
	}()
}

// subMessageOf is the command's own sub-message, if it has it.
func subMessageOf(cmd *pb.BaseCommand) (protoreflect.Message, bool) {
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protowire.Number(cmd.GetType()))
	if fd == nil || fd.Message() == nil || !m.Has(fd) {
		return nil, false
	}
	return m.Get(fd).Message(), true
}

// killed is why the broker closed connections, as Pulsar would have (nil: it never did).
func (b *muxBroker) killed() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.kills)
}

// received is how many commands of type t reached the broker.
func (b *muxBroker) received(t pb.BaseCommand_Type) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.got[t]
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
	return b.conns, len(b.producers), b.closed
}

func muxConfig(t testing.TB, queue int) (Config, *mux.Metrics) {
	cfg := testConfig()
	m := mux.NewMetrics(prometheus.NewRegistry())
	pool := mux.NewPool(mux.Config{Connector: cfg.Upstream, MaxConnections: 1, ClientQueueBytes: queue, Linger: time.Minute, Logger: zerolog.Nop(), Metrics: m})
	t.Cleanup(pool.Close)
	cfg.Multiplex = pool
	return cfg, m
}

func muxClient(t *testing.T, addr string, b brokers.Broker) *peer {
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
	wait.Until(t, 5*time.Second, "the gone client's producer to be closed on the broker", func() bool {
		_, producers, closed := b.state()
		return producers == 4 && closed == 1
	})
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
	wait.Until(t, 5*time.Second, "the slow client's consumer to be closed on the broker", func() bool {
		_, _, closed := b.state()
		return closed >= 1
	})
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
	wait.Until(t, 5*time.Second, "the muted broker to get the second PRODUCER", func() bool {
		return b.received(pb.BaseCommand_PRODUCER) == 2
	})
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

// neighbour is a well-behaved client on a shared connection: a producer and a consumer of
// its own, which must keep working whatever another client on the connection does.
type neighbour struct{ *peer }

func newNeighbour(t *testing.T, addr string, target brokers.Broker) neighbour {
	n := neighbour{muxClient(t, addr, target)}
	n.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String("t"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
	n.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{Topic: proto.String("t"),
		Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(2), RequestId: proto.Uint64(2)}})
	if a, b := n.recv(), n.recv(); a.GetProducerSuccess().GetRequestId() != 1 || b.GetSuccess().GetRequestId() != 2 {
		t.Fatalf("the neighbour's creations were answered %v and %v", a, b)
	}
	return n
}

// check has the neighbour publish one message and receive one: both reach the broker and
// come back over the shared connection.
func (n neighbour) check(seq uint64) {
	n.t.Helper()
	n.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}})
	if r := n.recv().GetSendReceipt(); r.GetProducerId() != 1 || r.GetSequenceId() != seq {
		n.t.Fatalf("the neighbour's SEND %d was answered %v", seq, r)
	}
	n.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(2), MessagePermits: proto.Uint32(1)}})
	if m := n.recv().GetMessage(); m.GetConsumerId() != 2 {
		n.t.Fatalf("the neighbour's FLOW was answered %v", m)
	}
}

// brokerHealth counts the connections the broker closed as Pulsar would have, and the
// connections opened to it.
type brokerHealth struct{ kills, conns int }

func (b *muxBroker) health() brokerHealth {
	b.mu.Lock()
	defer b.mu.Unlock()
	return brokerHealth{len(b.kills), b.conns}
}

// sharedIntact fails when, since the counts of since, the broker closed a connection (it does
// so, like Pulsar, on a command it cannot act on), or a connection other than the first
// shared one opened.
func sharedIntact(t *testing.T, b *muxBroker, since brokerHealth) {
	t.Helper()
	if kills := b.killed(); len(kills) > since.kills {
		t.Fatalf("the broker closed the shared connection: %q", kills[since.kills:])
	}
	if conns := b.health().conns; conns > max(since.conns, 1) {
		t.Fatalf("the broker saw %d connections, want the one shared", conns)
	}
}

func subscribeCmd(topic string, consumer, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{Topic: proto.String(topic),
		Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(consumer), RequestId: proto.Uint64(req)}}
}

func producerCmd(topic string, producer, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(producer), RequestId: proto.Uint64(req)}}
}

func consumerStatsCmd(consumer, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_CONSUMER_STATS.Enum(), ConsumerStats: &pb.CommandConsumerStats{
		ConsumerId: proto.Uint64(consumer), RequestId: proto.Uint64(req)}}
}

// TestMultiplexRefusedCreations: commands that use a producer or consumer the broker refused
// (ERROR to its PRODUCER or SUBSCRIBE) never reach the shared connection, where the broker
// would close it under every client (CONSUMER_STATS for a refused consumer, a SEND for a
// refused producer); the client gets what a broker answers for an id it lacks, the
// neighbour goes on, and a new creation under the refused id works.
func TestMultiplexRefusedCreations(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	cfg, _ := muxConfig(t, 1<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{target})
	n := newNeighbour(t, addr, target)
	a := muxClient(t, addr, target)
	a.send(subscribeCmd("refused", 3, 1))
	if got := a.recv(); got.GetError().GetRequestId() != 1 {
		t.Fatalf("refused SUBSCRIBE answered %v", got)
	}
	a.send(consumerStatsCmd(3, 2))
	if got := a.recv().GetConsumerStatsResponse(); got.GetRequestId() != 2 || got.GetErrorCode() != pb.ServerError_ConsumerNotFound {
		t.Fatalf("CONSUMER_STATS of the refused consumer answered %v", got)
	}
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(5)}})
	a.send(producerCmd("refused", 4, 3))
	if got := a.recv(); got.GetError().GetRequestId() != 3 {
		t.Fatalf("refused PRODUCER answered %v (FLOW for the refused consumer answered?)", got)
	}
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(4), SequenceId: proto.Uint64(1)}})
	n.check(1)
	a.send(producerCmd("t", 4, 5)) // the client's retry under the same id
	if got := a.recv(); got.GetProducerSuccess().GetRequestId() != 5 {
		t.Fatalf("PRODUCER after the refusal answered %v (SEND for the refused producer answered?)", got)
	}
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(4), SequenceId: proto.Uint64(2)}})
	if got := a.recv().GetSendReceipt(); got.GetProducerId() != 4 || got.GetSequenceId() != 2 {
		t.Fatalf("SEND on the recreated producer answered %v", got)
	}
	n.check(2)
	sharedIntact(t, b, brokerHealth{})
	brokerGot(t, b, map[pb.BaseCommand_Type]int{ // the neighbour's FLOWs and SENDs, and a's last SEND
		pb.BaseCommand_CONSUMER_STATS: 0, pb.BaseCommand_FLOW: 2, pb.BaseCommand_SEND: 3,
	})
}

// brokerGot fails unless the broker got as many commands of each type as want says.
func brokerGot(t *testing.T, b *muxBroker, want map[pb.BaseCommand_Type]int) {
	t.Helper()
	for typ, n := range want {
		if got := b.received(typ); got != n {
			t.Errorf("the broker got %d %v, want %d", got, typ, n)
		}
	}
}

// TestMultiplexPendingCreations: while the broker has not answered a PRODUCER or SUBSCRIBE,
// commands that use its id do not reach the shared connection (a SEND then is one Pulsar
// closes the connection on); a repeated creation goes on to the broker (how clients retry),
// and so does the close of a pending id (how a broker is told to cancel the creation).
func TestMultiplexPendingCreations(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	cfg, _ := muxConfig(t, 1<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{target})
	n := newNeighbour(t, addr, target)
	a := muxClient(t, addr, target)
	a.send(subscribeCmd("pending", 5, 1))
	a.send(consumerStatsCmd(5, 2))
	if got := a.recv().GetConsumerStatsResponse(); got.GetRequestId() != 2 || got.GetErrorCode() != pb.ServerError_ConsumerNotFound {
		t.Fatalf("CONSUMER_STATS of the pending consumer answered %v", got)
	}
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(5), MessagePermits: proto.Uint32(5)}})
	a.send(producerCmd("pending", 6, 3))
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(6), SequenceId: proto.Uint64(1)}})
	a.send(producerCmd("pending", 6, 4)) // the client repeats it: the broker says it is under way
	if got := a.recv(); got.GetError().GetRequestId() != 4 || got.GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("the repeated PRODUCER answered %v", got)
	}
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(6), SequenceId: proto.Uint64(2)}})
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(6), RequestId: proto.Uint64(5)}})
	a.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(5), RequestId: proto.Uint64(6)}})
	for _, req := range []uint64{5, 6} {
		if got := a.recv(); got.GetSuccess().GetRequestId() != req {
			t.Fatalf("close %d answered %v", req, got)
		}
	}
	n.check(1)
	sharedIntact(t, b, brokerHealth{})
	brokerGot(t, b, map[pb.BaseCommand_Type]int{
		pb.BaseCommand_CONSUMER_STATS: 0, pb.BaseCommand_FLOW: 1, pb.BaseCommand_SEND: 1, // the neighbour's
		pb.BaseCommand_PRODUCER: 3, pb.BaseCommand_CLOSE_PRODUCER: 1, pb.BaseCommand_CLOSE_CONSUMER: 1,
	})
}
