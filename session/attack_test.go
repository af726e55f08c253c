package session

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/frames"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
)

// The tests an attacker with a valid token for one topic would write against direct mode.
// A recording broker keeps the raw command of every frame that reaches it, and the broker
// model (brokermodel_test.go) says what a real broker would act on.

const attackPolicy = `
rules:
  - {roles: [alice], resources: ["acme/ns/allowed"], actions: [lookup, produce, consume]}
  - {roles: [alice], resources: ["persistent://pulsar/system/transaction_coordinator_assign"], actions: [lookup]}
`

const (
	allowedTopic   = "persistent://acme/ns/allowed"
	forbiddenTopic = "persistent://acme/ns/forbidden"
)

// recordingBroker answers CONNECT, then records the command bytes of every frame it gets;
// answer, when it returns a command, is sent back for a recorded command.
func recordingBroker(t *testing.T, answer func(cmd []byte) *pb.BaseCommand) (brokers.Broker, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 100)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		defer close(got)
		if _, err := readRawFrame(c); err != nil {
			return
		}
		frame.WriteCommand(c, frame.Connected("recording-broker", 21, 5<<20))
		for {
			cmd, err := readRawFrame(c)
			if err != nil {
				return
			}
			select {
			case got <- cmd:
			default:
			}
			if answer != nil {
				if a := answer(cmd); a != nil {
					frame.WriteCommand(c, a)
				}
			}
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return brokers.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}, got
}

// readRawFrame reads one frame by its header alone and returns the command's bytes, however
// they are encoded.
func readRawFrame(r io.Reader) ([]byte, error) {
	hdr := make([]byte, frame.HeaderSize)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	span, _, err := frame.Limits{MaxFrame: 16 << 20}.Scan(hdr)
	if err != nil {
		return nil, err
	}
	whole := append(hdr, make([]byte, span.Size-frame.HeaderSize)...)
	if _, err := io.ReadFull(r, whole[frame.HeaderSize:]); err != nil {
		return nil, err
	}
	return span.Command(whole), nil
}

// rawFrame frames command bytes as they are.
func rawFrame(command []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(command)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(command)))
	return append(b, command...)
}

func encodeCommand(t *testing.T, cmd *pb.BaseCommand) []byte {
	t.Helper()
	b, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// attackSession opens a direct session as alice through a proxy with the attack policy.
func attackSession(t *testing.T, answer func([]byte) *pb.BaseCommand) (*peer, <-chan []byte, *promtest.Registry, *Metrics) {
	t.Helper()
	b, got := recordingBroker(t, answer)
	sec, am := testSecurity(t, "", attackPolicy)
	addr, m := startSecureProxy(t, sec, nil, oneTarget{b})
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) {
		withToken(token(t, testSecret, "alice", time.Hour))(c)
		c.ProxyToBrokerUrl = proto.String(b.Addr())
	}))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: %v", got)
	}
	return p, got, am, m
}

// brokerGotNothingForbidden drains what reached the broker (after a PING round, or the
// session's end) and fails if a real broker would act on a topic other than the allowed one.
func brokerGotNothingForbidden(t *testing.T, p *peer, got <-chan []byte) {
	t.Helper()
	// A PING behind the attack: once the broker has it, it has everything sent before.
	p.c.Write(rawFrame(encodeCommand(t, frame.Ping())))
	deadline := time.After(5 * time.Second)
	for {
		select {
		case cmd, open := <-got:
			if !open {
				return
			}
			typ, action, topics, ok := brokerActsOn(cmd)
			if typ == pb.BaseCommand_PING {
				return
			}
			for _, topic := range topics {
				if ok && topic != allowedTopic {
					t.Fatalf("the broker got %v and would %s %q", typ, action, topic)
				}
			}
		case <-deadline:
			t.Fatal("the broker got neither the PING nor a close")
		}
	}
}

func producerOn(topic string, id uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)}}
}

func subscribeOn(topic string, id uint64) *pb.CommandSubscribe {
	return &pb.CommandSubscribe{Topic: proto.String(topic), Subscription: proto.String("s"),
		SubType: pb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id)}
}

// Finding 1: a SUBSCRIBE whose frame also carries a PRODUCER sub-message for an allowed topic
// was checked against the producer's topic; the broker subscribes to subscribe.topic.
func TestAttackSubscribeWithDecoyProducer(t *testing.T) {
	p, got, _, _ := attackSession(t, nil)
	crafted := &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: subscribeOn(forbiddenTopic, 1),
		Producer: producerOn(allowedTopic, 1).Producer}
	p.c.Write(rawFrame(encodeCommand(t, crafted)))
	if r := p.recv(); r.GetType() != pb.BaseCommand_ERROR || r.GetError().GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("crafted SUBSCRIBE: got %v, want AuthorizationError", r)
	}
	brokerGotNothingForbidden(t, p, got)
}

// Finding 2: a command Go's protobuf cannot decode was forwarded unchecked; the broker's
// decoder skips what it does not understand and acts on the topic.
func TestAttackUndecodableProducer(t *testing.T) {
	wide := protowire.AppendVarint(nil, 1<<35|1<<3|2) // truncated to 32 bits: the topic's tag
	wide = protowire.AppendString(wide, forbiddenTopic)
	for name, odd := range map[string][]byte{
		"field number 0":         {0x00, 0x00},
		"tag wider than 32 bits": wide,
		// Go allows field numbers up to 2^29-1; the broker skips any unknown one.
		"field number 2^29": protowire.AppendVarint(protowire.AppendVarint(nil, 1<<29<<3|0), 1),
	} {
		t.Run(name, func(t *testing.T) {
			prod, err := proto.Marshal(producerOn(forbiddenTopic, 2).Producer)
			if err != nil {
				t.Fatal(err)
			}
			cmd := protowire.AppendTag(nil, 1, protowire.VarintType)
			cmd = protowire.AppendVarint(cmd, uint64(pb.BaseCommand_PRODUCER))
			cmd = protowire.AppendTag(cmd, 5, protowire.BytesType)
			cmd = protowire.AppendBytes(cmd, append(prod, odd...))
			p, got, _, _ := attackSession(t, nil)
			p.c.Write(rawFrame(cmd))
			brokerGotNothingForbidden(t, p, got)
		})
	}
}

// Finding 3: lookup-type commands on a direct connection reached the broker unchecked.
func TestAttackLookupCommandsOnDirectConnection(t *testing.T) {
	for _, cmd := range []*pb.BaseCommand{
		{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String(forbiddenTopic), RequestId: proto.Uint64(1)}},
		{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{Topic: proto.String(forbiddenTopic), RequestId: proto.Uint64(1)}},
		{Type: pb.BaseCommand_GET_SCHEMA.Enum(), GetSchema: &pb.CommandGetSchema{Topic: proto.String(forbiddenTopic), RequestId: proto.Uint64(1)}},
		{Type: pb.BaseCommand_GET_OR_CREATE_SCHEMA.Enum(), GetOrCreateSchema: &pb.CommandGetOrCreateSchema{Topic: proto.String(forbiddenTopic), RequestId: proto.Uint64(1),
			Schema: &pb.Schema{Name: proto.String("s"), SchemaData: []byte("{}"), Type: pb.Schema_Json.Enum()}}},
	} {
		t.Run(cmd.GetType().String(), func(t *testing.T) {
			p, got, _, _ := attackSession(t, nil)
			p.send(cmd)
			r := p.recv()
			if id, ok := frame.RequestID(r); !ok || id != 1 {
				t.Fatalf("%v: got %v, want a refusal for request 1", cmd.GetType(), r)
			}
			brokerGotNothingForbidden(t, p, got)
		})
	}
}

// Finding 3: proxy-only commands from a client end the session before reaching the broker.
func TestAttackProxyOnlyCommandsOnDirectConnection(t *testing.T) {
	for _, cmd := range []*pb.BaseCommand{
		connectCmd(func(c *pb.CommandConnect) { c.OriginalPrincipal = proto.String("admin") }),
		{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String(allowedTopic), RequestId: proto.Uint64(1),
			OriginalPrincipal: proto.String("admin")}},
		{Type: pb.BaseCommand_END_TXN_ON_PARTITION.Enum(), EndTxnOnPartition: &pb.CommandEndTxnOnPartition{RequestId: proto.Uint64(1),
			Topic: proto.String(forbiddenTopic), TxnAction: pb.TxnAction_COMMIT.Enum()}},
	} {
		t.Run(cmd.GetType().String(), func(t *testing.T) {
			p, got, _, _ := attackSession(t, nil)
			p.send(cmd)
			r := p.recv()
			if r.GetType() != pb.BaseCommand_ERROR && r.GetType() != pb.BaseCommand_LOOKUP_RESPONSE {
				t.Fatalf("got %v, want a refusal", r)
			}
			p.expectClosed()
			for cmd := range got {
				t.Fatalf("the broker got %x", cmd)
			}
		})
	}
}

// Finding 3: the topics of a namespace list reach a direct client only where it may look
// them up, also when the list is longer than a read buffer (a large namespace).
func TestAttackTopicListOnDirectConnection(t *testing.T) {
	for _, hidden := range []int{1, 5000} {
		listed := []string{allowedTopic}
		for i := range hidden {
			listed = append(listed, forbiddenTopic+"-"+strconv.Itoa(i))
		}
		p, _, _, _ := attackSession(t, func(cmd []byte) *pb.BaseCommand {
			c, err := frame.Decode(cmd)
			if err != nil || c.GetType() != pb.BaseCommand_GET_TOPICS_OF_NAMESPACE {
				return nil
			}
			return &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(), GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
				RequestId: c.GetGetTopicsOfNamespace().RequestId, Topics: listed}}
		})
		for id := range uint64(2) { // twice: the session goes on after a filtered list
			p.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
				RequestId: proto.Uint64(id), Namespace: proto.String("acme/ns")}})
			r := p.recv().GetGetTopicsOfNamespaceResponse()
			if r.GetRequestId() != id || len(r.Topics) != 1 || r.Topics[0] != allowedTopic {
				t.Fatalf("topic list of %d: %d topics, want only %s", len(listed), len(r.Topics), allowedTopic)
			}
		}
	}
}

// floodingBroker answers CONNECT, then sends frames as fast as the proxy takes them, so a
// client that does not read soon blocks the proxy's writes to it.
func floodingBroker(t *testing.T) brokers.Broker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := readRawFrame(c); err != nil {
			return
		}
		frame.WriteCommand(c, frame.Connected("flooding-broker", 21, 5<<20))
		go io.Copy(io.Discard, c)
		big := frames.Send(t, 64<<10, 1)
		for {
			c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Write(big); err != nil {
				return
			}
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return brokers.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}
}

// keepSending writes PONGs (which need no answer) until the connection fails or stop closes.
func keepSending(c net.Conn, stop <-chan struct{}) {
	pong := rawFrame(mustMarshal(frame.Pong()))
	for {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(pong); err != nil && !isTimeout(err) {
			return
		}
	}
}

func mustMarshal(cmd *pb.BaseCommand) []byte {
	b, err := proto.Marshal(cmd)
	if err != nil {
		panic(err)
	}
	return b
}

// Finding 4: a client whose credentials expire must not keep them by not reading the
// challenge. The session ends at expiry plus the refresh timeout, whether or not the
// challenge could be written.
func TestAttackExpiredClientThatStopsReading(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		b := floodingBroker(t)
		sec, am := testSecurity(t, "", "")
		sec.RefreshTimeout = time.Second
		addr, m := startSecureProxy(t, sec, nil, oneTarget{b})
		p := dialPeer(t, addr)
		p.c.(*net.TCPConn).SetReadBuffer(4 << 10)
		p.send(connectCmd(func(c *pb.CommandConnect) {
			withToken(token(t, testSecret, "alice", time.Second))(c)
			c.ProxyToBrokerUrl = proto.String(b.Addr())
		}))
		stop := make(chan struct{})
		defer close(stop)
		go keepSending(p.c, stop) // and never reads
		waitCounter(t, m.closes.WithLabelValues(string(ReasonAuthExpired)), 1)
		am.Wait(t, "pulsar_proxy_authentication_failures_total", 1, "method", "token", "reason", string(authn.ReasonRefreshTimeout))
	})
	t.Run("lookup", func(t *testing.T) {
		huge := make([]string, 0, 40_000)
		for i := range 40_000 {
			huge = append(huge, "persistent://public/default/a-rather-long-topic-name-to-fill-the-socket-buffers-"+string(rune('a'+i%26)))
		}
		sec, am := testSecurity(t, "", "")
		sec.RefreshTimeout = time.Second
		addr, m := startSecureProxy(t, sec, fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
			return &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(), GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
				RequestId: cmd.GetGetTopicsOfNamespace().RequestId, Topics: huge}}, nil
		}), noTargets{})
		p := dialPeer(t, addr)
		p.c.(*net.TCPConn).SetReadBuffer(4 << 10)
		p.send(connectCmd(withToken(token(t, testSecret, "alice", 1500*time.Millisecond))))
		for id := range uint64(3) { // ~4 MB each, never read
			p.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
				RequestId: proto.Uint64(id), Namespace: proto.String("public/default")}})
		}
		stop := make(chan struct{})
		defer close(stop)
		go keepSending(p.c, stop)
		waitCounter(t, m.closes.WithLabelValues(string(ReasonAuthExpired)), 1)
		am.Wait(t, "pulsar_proxy_authentication_failures_total", 1, "method", "token", "reason", string(authn.ReasonRefreshTimeout))
	})
}

// Finding 6: lookup-mode requests reach brokers without the fields only a proxy sets, and
// without fields the proxy does not know.
func TestLookupRequestsAreStrippedOfProxyFields(t *testing.T) {
	seen := make(chan *pb.BaseCommand, 1)
	addr, _ := startProxy(t, testConfig(), fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		seen <- cmd
		return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: cmd.GetLookupTopic().RequestId, Response: pb.CommandLookupTopicResponse_Failed.Enum()}}, nil
	}), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv()
	forged := lookupCmd(allowedTopic, 9)
	forged.LookupTopic.OriginalPrincipal = proto.String("admin")
	forged.LookupTopic.OriginalAuthMethod = proto.String("token")
	forged.LookupTopic.OriginalAuthData = proto.String("admin-token")
	forged.Producer = producerOn(forbiddenTopic, 1).Producer
	b := mustMarshal(forged)
	b = protowire.AppendTag(b, 999, protowire.VarintType) // a field the proxy does not know
	b = protowire.AppendVarint(b, 1)
	p.c.Write(rawFrame(b))
	got := <-seen
	if l := got.GetLookupTopic(); l.OriginalPrincipal != nil || l.OriginalAuthMethod != nil || l.OriginalAuthData != nil ||
		got.Producer != nil || len(got.ProtoReflect().GetUnknown()) != 0 || l.GetTopic() != allowedTopic {
		t.Fatalf("the broker would get %v (unknown %x)", got, got.ProtoReflect().GetUnknown())
	}
	p.recv()
}
