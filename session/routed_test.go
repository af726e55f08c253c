package session

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
)

// owners is a lookup service for routed tests: each topic's owner, changed as a test moves
// topics; a topic it does not know fails the lookup.
type owners struct {
	mu   sync.Mutex
	of   map[string]brokers.Broker
	ask  map[string]int // lookups per topic
	gate chan struct{}  // non-nil: answers wait until it is closed (holdAnswers)
}

// holdAnswers makes lookups wait, each with the owner its topic had when it was asked,
// until the function returned is called.
func (o *owners) holdAnswers() (release func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gate = make(chan struct{})
	return sync.OnceFunc(func() { close(o.gate) })
}

func (o *owners) set(topic string, b brokers.Broker) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.of[topic] = b
}

func (o *owners) asked(topic string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ask[topic]
}

func (o *owners) resolve(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	l := cmd.GetLookupTopic()
	if l == nil {
		return nil, errors.New("only LOOKUP here")
	}
	o.mu.Lock()
	o.ask[l.GetTopic()]++
	b, ok := o.of[l.GetTopic()]
	gate := o.gate
	o.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if !ok {
		return nil, errors.New("no broker owns " + l.GetTopic())
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
		RequestId: l.RequestId, Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String(b.URL),
		Authoritative: proto.Bool(true)}}, nil
}

// routedRig is a proxy with routed sessions in front of two brokers, a and b.
type routedRig struct {
	addr     string
	a, b     *muxBroker
	atA, atB brokers.Broker
	owners   *owners
	srv      *Server
	metrics  *Metrics
	mux      *mux.Metrics
}

func newRoutedRig(t *testing.T, sec *Security) *routedRig {
	return newRoutedRigWith(t, sec, 10, 1<<20)
}

// newRoutedRigWith: brokers whose messages are msgSize bytes, clients' queues of queue bytes.
func newRoutedRigWith(t *testing.T, sec *Security, msgSize, queue int) *routedRig {
	a, atA := newMuxBroker(t, msgSize)
	b, atB := newMuxBroker(t, msgSize)
	cfg, mm := muxConfig(t, queue)
	cfg.Routed, cfg.Multiplex = cfg.Multiplex, nil
	o := &owners{of: map[string]brokers.Broker{}, ask: map[string]int{}}
	r := &routedRig{a: a, b: b, atA: atA, atB: atB, owners: o, mux: mm}
	r.metrics = NewMetrics(prometheus.NewRegistry())
	r.srv = NewServer(cfg, fakeResolver(o.resolve), targets{atA, atB}, r.metrics, zerolog.Nop())
	if sec != nil {
		r.srv.SetSecurity(*sec)
	}
	r.addr = serveOn(t, r.srv, nil)
	return r
}

// client connects as an HTTP-lookup client does: no proxy_to_broker_url.
func (r *routedRig) client(t *testing.T) *peer {
	p := dialPeer(t, r.addr)
	p.send(connectCmd(nil))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT answered %v", got)
	}
	return p
}

func routedProducer(topic string, id, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(req)}}
}

func sendOn(producer, seq uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(producer), SequenceId: proto.Uint64(seq)}}
}

func (p *peer) expect(t *testing.T, want pb.BaseCommand_Type) *pb.BaseCommand {
	t.Helper()
	got := p.recv()
	if got.GetType() != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	return got
}

// TestRoutedProducersGoToTheirTopicsOwners: an HTTP-lookup client's one connection carries
// producers of topics on both brokers; each goes to its topic's owner over the shared
// connections, lookups are still answered on the same connection, and when the client goes
// its producers are closed on both brokers.
func TestRoutedProducersGoToTheirTopicsOwners(t *testing.T) {
	r := newRoutedRig(t, nil)
	r.owners.set("persistent://t/n/on-a", r.atA)
	r.owners.set("persistent://t/n/on-b", r.atB)
	c := r.client(t)
	c.send(routedProducer("persistent://t/n/on-a", 1, 10))
	c.send(routedProducer("persistent://t/n/on-b", 2, 11))
	got := map[uint64]bool{}
	for range 2 {
		got[c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS).GetProducerSuccess().GetRequestId()] = true
	}
	if !got[10] || !got[11] {
		t.Fatalf("answers to requests %v, want 10 and 11", got)
	}
	for seq := range uint64(5) {
		c.send(sendOn(1, seq))
		c.send(sendOn(2, 100+seq))
	}
	receipts := map[uint64]uint64{}
	for range 10 {
		rc := c.expect(t, pb.BaseCommand_SEND_RECEIPT).GetSendReceipt()
		receipts[rc.GetSequenceId()] = rc.GetProducerId()
	}
	if len(receipts) != 10 || receipts[3] != 1 || receipts[103] != 2 {
		t.Fatalf("receipts %v", receipts)
	}
	if r.a.received(pb.BaseCommand_SEND) != 5 || r.b.received(pb.BaseCommand_SEND) != 5 {
		t.Errorf("SENDs: %d at a, %d at b; want 5 each", r.a.received(pb.BaseCommand_SEND), r.b.received(pb.BaseCommand_SEND))
	}
	c.send(lookupCmd("persistent://t/n/on-b", 12))
	if lr := c.expect(t, pb.BaseCommand_LOOKUP_RESPONSE).GetLookupTopicResponse(); lr.GetRequestId() != 12 || !lr.GetProxyThroughServiceUrl() {
		t.Errorf("a lookup on the routed connection: %v", lr)
	}
	if n := testutil.ToFloat64(r.metrics.activeSessions.WithLabelValues("routed")); n != 1 {
		t.Errorf("routed sessions active: %v", n)
	}
	c.c.Close()
	wait.Until(t, 5*time.Second, "the producers to be closed on both brokers", func() bool {
		_, pa, _ := r.a.state()
		_, pb, _ := r.b.state()
		return pa == 0 && pb == 0
	})
}

// TestRoutedFollowsATopicThatMoved: the broker closes a producer whose topic moved, naming
// the new owner; the client is told to reconnect without the broker's address (it must come
// back through the proxy), and its new PRODUCER is looked up again and goes to the new owner,
// where its SENDs go from then on.
func TestRoutedFollowsATopicThatMoved(t *testing.T) {
	r := newRoutedRig(t, nil)
	const topic = "persistent://t/n/moving"
	r.owners.set(topic, r.atA)
	c := r.client(t)
	c.send(routedProducer(topic, 1, 1))
	c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS)
	r.owners.set(topic, r.atB)
	r.a.closeProducers(t, "pulsar://broker-b:6650")
	cp := c.expect(t, pb.BaseCommand_CLOSE_PRODUCER).GetCloseProducer()
	if cp.GetProducerId() != 1 || cp.AssignedBrokerServiceUrl != nil || cp.AssignedBrokerServiceUrlTls != nil {
		t.Fatalf("the client's close: %v; want producer 1 and no broker address", cp)
	}
	c.send(routedProducer(topic, 1, 2))
	if got := c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS).GetProducerSuccess(); got.GetRequestId() != 2 {
		t.Fatalf("re-created producer: %v", got)
	}
	c.send(sendOn(1, 7))
	if rc := c.expect(t, pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); rc.GetSequenceId() != 7 {
		t.Fatalf("receipt %v", rc)
	}
	if r.a.received(pb.BaseCommand_SEND) != 0 || r.b.received(pb.BaseCommand_SEND) != 1 {
		t.Errorf("SENDs: %d at the old owner, %d at the new; want 0 and 1", r.a.received(pb.BaseCommand_SEND), r.b.received(pb.BaseCommand_SEND))
	}
	if n := r.owners.asked(topic); n != 2 {
		t.Errorf("topic looked up %d times, want 2 (each creation)", n)
	}
	if n := testutil.ToFloat64(r.metrics.routed.WithLabelValues("moved")); n != 1 {
		t.Errorf("moved lookups: %v, want 1", n)
	}
}

// TestRoutedCreationAfterALookupUnderWay: a client creates a producer again while the first
// creation's lookup is still under way, and the topic moves meanwhile: the second creation
// is looked up afresh once the first lookup ended, and goes to the new owner, as do the
// producer's SENDs. Held behind the first lookup, it went to the old owner without a lookup
// (a broker's close saying the topic moved can reach the client before the commands held
// behind a lookup are all sent, and the client re-creates at once). Meanwhile the client's
// other commands are read and answered: the wait is its key's alone.
func TestRoutedCreationAfterALookupUnderWay(t *testing.T) {
	r := newRoutedRig(t, nil)
	const topic = "persistent://t/n/moving-early"
	r.owners.set(topic, r.atA)
	release := r.owners.holdAnswers()
	defer release()
	c := r.client(t)
	c.send(routedProducer(topic, 1, 1))
	c.send(routedProducer(topic, 1, 2))
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	c.expect(t, pb.BaseCommand_PONG) // the lookup still held
	wait.Until(t, 5*time.Second, "the first lookup to be asked", func() bool { return r.owners.asked(topic) == 1 })
	r.owners.set(topic, r.atB)
	release()
	// Answered by two brokers: in either order.
	answered := map[uint64]bool{}
	for range 2 {
		answered[c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS).GetProducerSuccess().GetRequestId()] = true
	}
	if !answered[1] || !answered[2] {
		t.Fatalf("PRODUCER_SUCCESS for requests %v, want 1 and 2", answered)
	}
	c.send(sendOn(1, 7))
	if rc := c.expect(t, pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); rc.GetSequenceId() != 7 {
		t.Fatalf("receipt %v", rc)
	}
	if n := r.owners.asked(topic); n != 2 {
		t.Errorf("topic looked up %d times, want 2 (each creation)", n)
	}
	if a, b := r.a.received(pb.BaseCommand_PRODUCER), r.b.received(pb.BaseCommand_PRODUCER); a != 1 || b != 1 {
		t.Errorf("PRODUCERs: %d at the old owner, %d at the new; want 1 and 1", a, b)
	}
	if a, b := r.a.received(pb.BaseCommand_SEND), r.b.received(pb.BaseCommand_SEND); a != 0 || b != 1 {
		t.Errorf("SENDs: %d at the old owner, %d at the new; want 0 and 1", a, b)
	}
}

// closeProducers closes every producer the broker has, as a broker whose topic is unloaded
// does, naming where it went (the extensible load manager's assignedBrokerServiceUrl).
func (b *muxBroker) closeProducers(t *testing.T, assigned string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.producers {
		for _, c := range b.open {
			frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
				ProducerId: proto.Uint64(id), RequestId: proto.Uint64(1<<64 - 1), AssignedBrokerServiceUrl: proto.String(assigned)}})
		}
		delete(b.producers, id)
	}
}

// TestRoutedIDsOfAnotherClient: a client cannot use or close another client's producer by
// naming its id: its own connection has no such producer, and it is answered as a broker
// answers an id it lacks; the other client's producer is untouched.
func TestRoutedIDsOfAnotherClient(t *testing.T) {
	r := newRoutedRig(t, nil)
	r.owners.set("persistent://t/n/x", r.atA)
	owner, attacker := r.client(t), r.client(t)
	owner.send(routedProducer("persistent://t/n/x", 1, 1))
	owner.expect(t, pb.BaseCommand_PRODUCER_SUCCESS)
	attacker.send(sendOn(1, 99))
	attacker.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(5)}})
	if got := attacker.expect(t, pb.BaseCommand_SUCCESS).GetSuccess(); got.GetRequestId() != 5 {
		t.Fatalf("attacker's close answered %v", got)
	}
	owner.send(sendOn(1, 1))
	if rc := owner.expect(t, pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); rc.GetSequenceId() != 1 {
		t.Fatalf("owner's receipt %v", rc)
	}
	if n := r.a.received(pb.BaseCommand_SEND); n != 1 {
		t.Errorf("broker got %d SENDs, want the owner's one", n)
	}
	if _, producers, closed := r.a.state(); producers != 1 || closed != 0 {
		t.Errorf("broker has %d producers, %d closed; want the owner's open", producers, closed)
	}
}

// TestRoutedPolicyPerCommand: every routed command is decided by the edge: a producer on a
// topic the role may not produce to is refused before any lookup or broker hears of it, and a
// frame carrying other sub-messages beside its own reaches the broker as its type alone.
func TestRoutedPolicyPerCommand(t *testing.T) {
	policy, err := authz.ParsePolicy([]byte("rules:\n  - roles: [alice]\n    resources: [\"t/n/open\"]\n    actions: [produce, lookup]\n"))
	if err != nil {
		t.Fatal(err)
	}
	sec := &Security{Authenticator: authn.NewAuthenticator("alice"), Edge: edge.New(edge.Config{Policy: staticPolicy{policy}})}
	r := newRoutedRig(t, sec)
	r.owners.set("persistent://t/n/open", r.atA)
	r.owners.set("persistent://t/n/closed", r.atA)
	c := r.client(t)
	c.send(routedProducer("persistent://t/n/closed", 1, 1))
	if e := c.expect(t, pb.BaseCommand_ERROR).GetError(); e.GetError() != pb.ServerError_AuthorizationError || e.GetRequestId() != 1 {
		t.Fatalf("denied producer answered %v", e)
	}
	smuggled := routedProducer("persistent://t/n/open", 2, 2)
	smuggled.Subscribe = &pb.CommandSubscribe{Topic: proto.String("persistent://t/n/closed"), Subscription: proto.String("s"),
		SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(2), RequestId: proto.Uint64(2)}
	c.send(smuggled)
	c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS)
	if r.owners.asked("persistent://t/n/closed") != 0 || r.a.received(pb.BaseCommand_SUBSCRIBE) != 0 {
		t.Errorf("the denied topic was looked up (%d) or subscribed (%d)", r.owners.asked("persistent://t/n/closed"), r.a.received(pb.BaseCommand_SUBSCRIBE))
	}
	if k := r.a.killed(); len(k) != 0 {
		t.Errorf("the shared connection was closed by the broker: %v", k)
	}
}

// TestRoutedCreationBehindALookupIsAskedAsALookup: a creation that comes while its key is
// being looked up is asked about as its own lookup: a topic the role may produce to but not
// look up is refused, not sent behind the first creation's lookup to where that topic was.
func TestRoutedCreationBehindALookupIsAskedAsALookup(t *testing.T) {
	policy, err := authz.ParsePolicy([]byte("rules:\n  - roles: [alice]\n    resources: [\"t/n/open\"]\n    actions: [produce, lookup]\n" +
		"  - roles: [alice]\n    resources: [\"t/n/hidden\"]\n    actions: [produce]\n"))
	if err != nil {
		t.Fatal(err)
	}
	sec := &Security{Authenticator: authn.NewAuthenticator("alice"), Edge: edge.New(edge.Config{Policy: staticPolicy{policy}})}
	r := newRoutedRig(t, sec)
	r.owners.set("persistent://t/n/open", r.atA)
	r.owners.set("persistent://t/n/hidden", r.atA)
	release := r.owners.holdAnswers()
	defer release()
	c := r.client(t)
	c.send(routedProducer("persistent://t/n/open", 1, 1))
	c.send(routedProducer("persistent://t/n/hidden", 1, 2))
	if e := c.expect(t, pb.BaseCommand_ERROR).GetError(); e.GetError() != pb.ServerError_AuthorizationError || e.GetRequestId() != 2 {
		t.Fatalf("the creation behind the lookup answered %v", e)
	}
	release()
	if got := c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS).GetProducerSuccess(); got.GetRequestId() != 1 {
		t.Fatalf("PRODUCER_SUCCESS %v, want request 1", got)
	}
	if n := r.owners.asked("persistent://t/n/hidden"); n != 0 {
		t.Errorf("the topic the role may not look up was looked up %d times", n)
	}
	if n := r.a.received(pb.BaseCommand_PRODUCER); n != 1 {
		t.Errorf("the broker got %d PRODUCERs, want the first", n)
	}
}

// TestRoutedLookupFailureFailsThatCommandOnly: a producer whose topic has no owner gets
// ServiceNotReady (clients retry), and the connection goes on.
func TestRoutedLookupFailureFailsThatCommandOnly(t *testing.T) {
	r := newRoutedRig(t, nil)
	r.owners.set("persistent://t/n/ok", r.atB)
	c := r.client(t)
	c.send(routedProducer("persistent://t/n/nowhere", 1, 1))
	if e := c.expect(t, pb.BaseCommand_ERROR).GetError(); e.GetError() != pb.ServerError_ServiceNotReady || !strings.Contains(e.GetMessage(), "nowhere") {
		t.Fatalf("unroutable producer answered %v", e)
	}
	c.send(routedProducer("persistent://t/n/ok", 2, 2))
	c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS)
}

// TestRoutedTransactionsGoToTheirCoordinator: a transaction coordinator's commands go to the
// broker that owns its partition of the coordinators' topic, the transaction's commands
// after it too (by the coordinator id in the transaction id).
func TestRoutedTransactionsGoToTheirCoordinator(t *testing.T) {
	r := newRoutedRig(t, nil)
	r.owners.set(edge.CoordinatorTopic(1), r.atB)
	c := r.client(t)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST.Enum(), TcClientConnectRequest: &pb.CommandTcClientConnectRequest{RequestId: proto.Uint64(1), TcId: proto.Uint64(1)}})
	c.recv()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_NEW_TXN.Enum(), NewTxn: &pb.CommandNewTxn{RequestId: proto.Uint64(2), TcId: proto.Uint64(1)}})
	c.recv()
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_END_TXN.Enum(), EndTxn: &pb.CommandEndTxn{RequestId: proto.Uint64(3), TxnidMostBits: proto.Uint64(1), TxnidLeastBits: proto.Uint64(9)}})
	c.recv()
	for _, typ := range []pb.BaseCommand_Type{pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST, pb.BaseCommand_NEW_TXN, pb.BaseCommand_END_TXN} {
		if r.b.received(typ) != 1 || r.a.received(typ) != 0 {
			t.Errorf("%v: %d at the coordinator's broker, %d at the other", typ, r.b.received(typ), r.a.received(typ))
		}
	}
	if n := r.owners.asked(edge.CoordinatorTopic(1)); n != 1 {
		t.Errorf("coordinator looked up %d times; its connect once, the transaction's commands follow it", n)
	}
}

// TestRoutedOwnerLookupIsTheClients: the lookup that finds a producer's broker is decided as
// the client's own LOOKUP: a role that may produce to a topic but not look it up is refused,
// and no broker is asked.
func TestRoutedOwnerLookupIsTheClients(t *testing.T) {
	policy, err := authz.ParsePolicy([]byte("rules:\n  - roles: [alice]\n    resources: [\"t/n/*\"]\n    actions: [produce]\n"))
	if err != nil {
		t.Fatal(err)
	}
	sec := &Security{Authenticator: authn.NewAuthenticator("alice"), Edge: edge.New(edge.Config{Policy: staticPolicy{policy}})}
	r := newRoutedRig(t, sec)
	r.owners.set("persistent://t/n/x", r.atA)
	c := r.client(t)
	c.send(routedProducer("persistent://t/n/x", 1, 1))
	if e := c.expect(t, pb.BaseCommand_ERROR).GetError(); e.GetError() != pb.ServerError_AuthorizationError || !strings.Contains(e.GetMessage(), "lookup") {
		t.Fatalf("producer without the lookup grant answered %v", e)
	}
	if n := r.owners.asked("persistent://t/n/x"); n != 0 {
		t.Errorf("the owner was looked up %d times", n)
	}
}

// TestRoutedFirstCommandThatCloses: a command that makes the session routed and ends it
// (a PRODUCER without its own sub-message, which a broker cannot read) is refused, and the
// session ends whole: its queue's writer too (the package's goleak check).
func TestRoutedFirstCommandThatCloses(t *testing.T) {
	r := newRoutedRig(t, nil)
	c := r.client(t)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum()})
	c.expect(t, pb.BaseCommand_ERROR)
	c.expectClosed()
	waitCounter(t, r.metrics.closes.WithLabelValues(string(ReasonCommandRefused)), 1)
}

// TestRoutedProducerIDReusedOnAnotherTopic: a client that creates a producer with the id of
// one it still has, on a topic another broker owns, moves that id: the old broker is told to
// close its producer (no id left behind to be used or leak), and the id's SENDs go to the
// new one only.
func TestRoutedProducerIDReusedOnAnotherTopic(t *testing.T) {
	r := newRoutedRig(t, nil)
	r.owners.set("persistent://t/n/x", r.atA)
	r.owners.set("persistent://t/n/y", r.atB)
	c := r.client(t)
	c.send(routedProducer("persistent://t/n/x", 1, 1))
	c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS)
	c.send(routedProducer("persistent://t/n/y", 1, 2))
	c.expect(t, pb.BaseCommand_PRODUCER_SUCCESS)
	wait.Until(t, 5*time.Second, "the old broker to close the moved id's producer", func() bool {
		_, producers, closed := r.a.state()
		return producers == 0 && closed == 1
	})
	c.send(sendOn(1, 3))
	if rc := c.expect(t, pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); rc.GetSequenceId() != 3 {
		t.Fatalf("receipt %v", rc)
	}
	if r.a.received(pb.BaseCommand_SEND) != 0 || r.b.received(pb.BaseCommand_SEND) != 1 {
		t.Errorf("SENDs: %d at the old broker, %d at the new; want 0 and 1", r.a.received(pb.BaseCommand_SEND), r.b.received(pb.BaseCommand_SEND))
	}
}

// TestRoutedSlowNeighbour: two routed clients of one role share a broker connection; the one
// that asks for messages and reads none is disconnected as a slow consumer once its queue is
// over the bound, its consumer closed at the broker, while its neighbour gets every message
// it asked for and goes on.
func TestRoutedSlowNeighbour(t *testing.T) {
	r := newRoutedRigWith(t, nil, 64<<10, 16<<20) // holds the fast one's 200 x 64 KiB, not the slow one's 1000
	r.owners.set("persistent://t/n/s", r.atA)
	slow, fast := r.client(t), r.client(t)
	for _, p := range []*peer{slow, fast} {
		p.send(subscribeCmd("persistent://t/n/s", 3, 1))
		if got := p.expect(t, pb.BaseCommand_SUCCESS).GetSuccess(); got.GetRequestId() != 1 {
			t.Fatalf("subscribe answer %v", got)
		}
	}
	if conns, _, _ := r.a.state(); conns != 1 {
		t.Fatalf("%d broker connections; the two clients of one role should share one", conns)
	}
	if tc, ok := slow.c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10)
	}
	slow.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(1000)}})
	fast.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(200)}})
	for range 200 {
		if got := fast.expect(t, pb.BaseCommand_MESSAGE).GetMessage(); got.GetConsumerId() != 3 {
			t.Fatalf("fast consumer got %v", got)
		}
	}
	waitCounter(t, r.metrics.closes.WithLabelValues(string(ReasonSlowConsumer)), 1)
	wait.Until(t, 5*time.Second, "the slow client's consumer to be closed on the broker", func() bool {
		_, _, closed := r.a.state()
		return closed >= 1
	})
	fast.send(frame.Ping())
	fast.expect(t, pb.BaseCommand_PONG)
}

// TestRoutedHostileNeighbour: a routed client that sends what the shared connection's broker
// would close the connection on (a frame over its limit, a SEND whose message it cannot read)
// is refused at the proxy, and its neighbour of the same role, on the same broker connection,
// goes on: the broker closed no connection and saw one.
func TestRoutedHostileNeighbour(t *testing.T) {
	r := newRoutedRig(t, nil)
	r.a.mu.Lock()
	r.a.maxMessage = 1 << 10
	r.a.mu.Unlock()
	r.owners.set("persistent://t/n/x", r.atA)
	neighbour, hostile, hostile2 := r.client(t), r.client(t), r.client(t)
	for i, p := range []*peer{neighbour, hostile, hostile2} {
		p.send(routedProducer("persistent://t/n/x", 1, uint64(i+1)))
		p.expect(t, pb.BaseCommand_PRODUCER_SUCCESS)
	}
	since := r.a.health()
	big, err := frame.AppendPayloadCommand(nil, sendOn(1, 1), nil, &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}, bytes.Repeat([]byte{'x'}, 12<<10))
	if err != nil {
		t.Fatal(err)
	}
	hostile.c.Write(big)
	if e := hostile.expect(t, pb.BaseCommand_ERROR).GetError(); e.GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("a frame over the broker's limit: %v", e)
	}
	hostile.expectClosed()
	hostile2.c.Write(rawPayloadFrame(t, sendOn(1, 1), []byte("not a message")))
	if e := hostile2.expect(t, pb.BaseCommand_ERROR).GetError(); e.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("a SEND whose message cannot be read: %v", e)
	}
	hostile2.expectClosed()
	neighbour.send(sendOn(1, 5))
	if rc := neighbour.expect(t, pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); rc.GetSequenceId() != 5 {
		t.Fatalf("the neighbour's receipt %v", rc)
	}
	sharedIntact(t, r.a, since)
	if n := r.a.received(pb.BaseCommand_SEND); n != 1 {
		t.Errorf("the broker got %d SENDs, want the neighbour's one", n)
	}
}

// rawPayloadFrame is a frame of cmd with payload as it is (no checksum or metadata section).
func rawPayloadFrame(t *testing.T, cmd *pb.BaseCommand, payload []byte) []byte {
	t.Helper()
	c, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(c)+len(payload)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
	return append(append(b, c...), payload...)
}

// TestHeldCommandsStayCountedUntilSent: flush takes a route's held commands only up to the
// first creation to be looked up afresh; that creation and what follows stay held, and
// counted in the connection's bound, until their own lookup. Taken out with the rest and
// counted again later, they let a client hold more than the bound while the commands before
// them were being sent, by another bound's worth at each creation.
func TestHeldCommandsStayCountedUntilSent(t *testing.T) {
	x := &routed{}
	x.settled = sync.NewCond(&x.mu)
	r := &route{resolving: true}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, relook := range []bool{false, false, true, false} {
		x.holdLocked(r, sendOn(1, uint64(i)), make([]byte, 10), make([]byte, 100)).relook = relook
	}
	held := x.takeHeldLocked(r)
	if len(held) != 2 || len(r.held) != 2 || !r.held[0].relook {
		t.Fatalf("took %d, left %d (the first left a creation to look up: %v); want 2 and 2", len(held), len(r.held), len(r.held) > 0 && r.held[0].relook)
	}
	if x.heldBytes != 2*110 {
		t.Fatalf("held bytes %d, want the two left: 220", x.heldBytes)
	}
}

// TestRoutedNoLookupAfterTheClientLeft: creations held behind a lookup when the client goes
// are not looked up any more (a lookup's flight outlives its caller: each would still ask a
// broker); their lookup places are given back.
func TestRoutedNoLookupAfterTheClientLeft(t *testing.T) {
	r := newRoutedRig(t, nil)
	const topic = "persistent://t/n/left"
	r.owners.set(topic, r.atA)
	release := r.owners.holdAnswers()
	defer release()
	c := r.client(t)
	for req := uint64(1); req <= 3; req++ {
		c.send(routedProducer(topic, 1, req))
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	c.expect(t, pb.BaseCommand_PONG) // all three read
	c.c.Close()
	release()
	wait.Until(t, 5*time.Second, "the routed session to end", func() bool {
		return testutil.ToFloat64(r.metrics.activeSessions.WithLabelValues("routed")) == 0
	})
	if n := r.owners.asked(topic); n != 1 {
		t.Errorf("topic looked up %d times, want once (the lookup under way as the client left)", n)
	}
	if n := testutil.ToFloat64(r.metrics.lookupsInFlight); n != 0 {
		t.Errorf("%v lookup places still taken", n)
	}
}
