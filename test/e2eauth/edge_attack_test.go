package e2eauth

import (
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The attack of issue 11 against real brokers: dave may consume topic A only (the proxy's
// policy), while the brokers would let him produce and consume anywhere in acme/shared. On a
// direct connection to the broker that owns topic B he sends a SUBSCRIBE for B that also
// carries a PRODUCER sub-message for A, and a PRODUCER for B that Go's protobuf cannot
// decode (a field number 0 inside, which Pulsar's decoder skips). Neither may reach the
// broker: B's stats show no subscription and no producer; dave got errors; the proxy counted
// the denials. The same crafted path with A's topic does reach the broker (the control).
func TestCraftedFramesCannotReachForbiddenTopics(t *testing.T) {
	a, b := uniqueTopic(nsShared, "edge-a"), uniqueTopic(nsShared, "edge-b")
	p := startProxy(t, `
rules:
  - roles: [dave]
    resources: ["`+strings.TrimPrefix(a, "persistent://")+`"]
    actions: [lookup, consume]
`, "")
	ctx := ctxT(t, 2*time.Minute)
	for _, topic := range []string{a, b} {
		if err := brokers().CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	ownerOf := func(topic string) string {
		o, err := brokers().TopicOwner(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimPrefix(o.URL, "pulsar://")
	}

	// The control: the crafted frame for A is a working SUBSCRIBE.
	c, r := directConnect(t, p.Addr, ownerOf(a), "dave")
	// Ids well above those a shared broker connection hands out first, so that an answer
	// not mapped back to the client's id (TestAuthMultiplexed) shows.
	frame.WriteCommand(c, craftedSubscribe(a, a, 7001))
	if got := readCmd(t, r); got.GetType() != pb.BaseCommand_SUCCESS || got.GetSuccess().GetRequestId() != 7001 {
		t.Fatalf("SUBSCRIBE 7001 to A: %v, want SUCCESS from the broker for request 7001", got)
	}

	c, r = directConnect(t, p.Addr, ownerOf(b), "dave")
	frame.WriteCommand(c, craftedSubscribe(b, a, 7002))
	if got := readCmd(t, r); got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthorizationError ||
		got.GetError().GetRequestId() != 7002 {
		t.Fatalf("crafted SUBSCRIBE 7002 to B: %v, want AuthorizationError for request 7002", got)
	}
	c.Write(rawFrame(undecodableProducer(t, b, 7003)))
	if got := readCmd(t, r); got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthorizationError ||
		!strings.Contains(got.GetError().GetMessage(), "cannot read PRODUCER") {
		t.Fatalf("undecodable PRODUCER for B: %v, want the proxy's AuthorizationError \"cannot read PRODUCER\"", got)
	}
	// Then the proxy closes the session: the next read ends (EOF or reset), not at the
	// connection's deadline, and brings no further frame.
	if f, err := r.ReadFrame(); err == nil {
		cmd, _ := frame.Decode(f.Command)
		t.Fatalf("the session goes on after an undecodable command: %v", cmd)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the session was neither closed nor answered after an undecodable command: %v", err)
	}

	st, err := brokers().TopicStats(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Subscriptions) != 0 || len(st.Publishers) != 0 {
		t.Fatalf("topic B has subscriptions %v and publishers %v", st.Subscriptions, st.Publishers)
	}
	if got := p.metric(t, "pulsar_proxy_authorization_denials_total", `action="consume"`); got < 1 {
		t.Fatalf("consume denials = %v", got)
	}
	if got := p.metric(t, "pulsar_proxy_refused_commands_total", `reason="undecodable"`); got < 1 {
		t.Fatalf("refused undecodable commands = %v", got)
	}
}

// directConnect opens a direct session to target through the proxy as role.
func directConnect(t *testing.T, proxyAddr, target, role string) (net.Conn, *frame.Reader) {
	t.Helper()
	c, r, resp := rawConnectWith(t, proxyAddr, func(cc *pb.CommandConnect) {
		cc.AuthMethodName, cc.AuthData = proto.String("token"), []byte(mustToken(role, 0))
		cc.ProxyToBrokerUrl = proto.String(target)
	})
	if resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("direct CONNECT to %s: %v", target, resp)
	}
	return c, r
}

// craftedSubscribe is a SUBSCRIBE to topic with a PRODUCER sub-message for decoy beside it.
func craftedSubscribe(topic, decoy string, id uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(),
		Subscribe: &pb.CommandSubscribe{Topic: proto.String(topic), Subscription: proto.String("edge"),
			SubType: pb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id)},
		Producer: &pb.CommandProducer{Topic: proto.String(decoy), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)}}
}

// undecodableProducer is a PRODUCER for topic with a field number 0 inside the sub-message.
func undecodableProducer(t *testing.T, topic string, id uint64) []byte {
	t.Helper()
	sub, err := proto.Marshal(&pb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)})
	if err != nil {
		t.Fatal(err)
	}
	cmd := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.BaseCommand_PRODUCER))
	return protowire.AppendBytes(protowire.AppendTag(cmd, 5, protowire.BytesType), append(sub, 0x00, 0x00))
}

func rawFrame(command []byte) []byte {
	n := len(command)
	return append([]byte{byte((n + 4) >> 24), byte((n + 4) >> 16), byte((n + 4) >> 8), byte(n + 4),
		byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, command...)
}
