package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// hostileCommands are the commands a Pulsar broker cannot process and answers by closing the
// whole connection, each as a client could send it: required fields missing, the command's
// own sub-message missing or cut short, ids it never created.
var hostileCommands = map[string][]byte{
	"FLOW without message_permits": command(pb.BaseCommand_FLOW, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)),
	"END_TXN without request_id":   command(pb.BaseCommand_END_TXN, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)),
	"SEND without its sub-message": protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.BaseCommand_SEND)),
	"ACK cut short":                append(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.BaseCommand_ACK)), 0x52, 0x10, 0x08),
	"PRODUCER without a topic":     command(pb.BaseCommand_PRODUCER, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)),
	"SUBSCRIBE without subType": mustMarshal(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String("persistent://public/default/x"), Subscription: proto.String("s"), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1)}}, true),
	"CONSUMER_STATS of no consumer": mustMarshal(&pb.BaseCommand{Type: pb.BaseCommand_CONSUMER_STATS.Enum(), ConsumerStats: &pb.CommandConsumerStats{
		RequestId: proto.Uint64(9), ConsumerId: proto.Uint64(77)}}, false),
	"SEND of no producer": mustMarshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(77), SequenceId: proto.Uint64(1)}}, false),
	"a second CONNECT": mustMarshal(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("x"), ProtocolVersion: proto.Int32(21)}}, false),
}

// command is a BaseCommand of type t whose own sub-message is sub, as bytes.
func command(t pb.BaseCommand_Type, sub []byte) []byte {
	b := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(t))
	return protowire.AppendBytes(protowire.AppendTag(b, protowire.Number(t), protowire.BytesType), sub)
}

func mustMarshal(cmd *pb.BaseCommand, partial bool) []byte {
	b, err := proto.MarshalOptions{AllowPartial: partial}.Marshal(cmd)
	if err != nil {
		panic(err)
	}
	return b
}

// TestMultiplexHostileNeighbour (issue 25, finding 2): with broker.multiplex on, a neighbour
// produces and consumes 1,000 messages through one shared broker connection while a hostile
// client of the same principal, on the same broker, sends each kind of command a broker
// closes a connection on. The proxy ends the hostile client's sessions only: the neighbour
// gets every message in order, its producer and consumer stay on the same broker connection
// (the broker's topic stats show one address before and after), and the proxy opened no
// other shared connection.
func TestMultiplexHostileNeighbour(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), muxYAML(1))
	topic := uniqueTopic(t, "mux-hostile")
	if err := theRig.PlaceTopic(testCtx(t), topic, 1); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, proxy.PulsarURL)
	consumer := subscribe(t, c, topic, "neighbour", pulsar.Exclusive)
	producer, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	before := connectionsOf(t, topic)
	dials := proxy.count(t, "pulsar_proxy_multiplex_dials_total", `result="ok"`)
	owner := strings.TrimPrefix(theRig.BrokerURL(1), "pulsar://")

	const n = 1000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if _, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			if i%100 == 0 {
				time.Sleep(20 * time.Millisecond) // spread the sends over the attack
			}
		}
	}()
	for name, cmd := range hostileCommands {
		t.Logf("%s: %s", name, hostileSend(t, proxy.Addr, owner, cmd))
	}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := consumer.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: lost or out of order", i, m.Payload())
		}
		consumer.Ack(m)
	}
	wg.Wait()
	if after := connectionsOf(t, topic); after != before {
		t.Errorf("the neighbour's broker connection changed from %s to %s: the shared connection was closed under it", before, after)
	}
	if d := proxy.count(t, "pulsar_proxy_multiplex_dials_total", `result="ok"`); d != dials {
		t.Errorf("the proxy opened %v shared connections during the attack, want none", d-dials)
	}
}

// hostileSend opens a multiplexed session to owner, sends one command as raw bytes and a PING
// behind it, and says what came back: an error, the session's end, or the PONG (the
// command was answered as a broker would, or dropped, and the session goes on).
func hostileSend(t *testing.T, proxyAddr, owner string, cmd []byte) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	r := frame.NewReader(conn, 0)
	frame.WriteCommand(conn, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("e2e-hostile"), ProtocolVersion: proto.Int32(21), ProxyToBrokerUrl: proto.String(owner)}})
	if got, err := r.ReadCommand(); err != nil || got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: %v %v", got, err)
	}
	hdr := make([]byte, 0, 8+len(cmd))
	hdr = append(hdr, byte((len(cmd)+4)>>24), byte((len(cmd)+4)>>16), byte((len(cmd)+4)>>8), byte(len(cmd)+4))
	hdr = append(hdr, byte(len(cmd)>>24), byte(len(cmd)>>16), byte(len(cmd)>>8), byte(len(cmd)))
	conn.Write(append(hdr, cmd...))
	frame.WriteCommand(conn, frame.Ping())
	var seen []string
	for {
		got, err := r.ReadCommand()
		switch {
		case err != nil:
			return fmt.Sprintf("%v, then the session ended (%v)", seen, err)
		case got.GetType() == pb.BaseCommand_PONG:
			return fmt.Sprintf("%v, and the session goes on", seen)
		case got.GetError() != nil:
			seen = append(seen, got.GetError().GetError().String()+": "+got.GetError().GetMessage())
		default:
			seen = append(seen, got.GetType().String())
		}
	}
}

// connectionsOf names the broker connections of topic's publishers and consumers, as the
// broker's stats show them.
func connectionsOf(t *testing.T, topic string) string {
	t.Helper()
	st, err := theRig.TopicStats(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range st.Publishers {
		seen[p.Address] = true
	}
	for _, s := range st.Subscriptions {
		for _, c := range s.Consumers {
			seen[c.Address] = true
		}
	}
	var out []string
	for a := range seen {
		out = append(out, a)
	}
	if len(out) != 1 {
		t.Fatalf("%s is served over %d broker connections (%v), want one shared connection", topic, len(out), out)
	}
	return out[0]
}
