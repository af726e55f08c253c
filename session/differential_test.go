package session

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/forward"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/loopback"
)

// The differential test of the direct-mode client rules: for generated commands of every
// type, with zero, one or several sub-messages, valid and malformed, every frame the proxy
// lets through (as it came or re-encoded) is read by the broker model, and whatever a broker
// would act on must be something the policy allows. The oracle does not use the proxy's own
// topic parser: it knows which names of its pool are the allowed topic.

// topicPool: the allowed topic under its Pulsar spellings, and names that look like it.
var topicPool = []string{
	"persistent://acme/ns/allowed", "acme/ns/allowed", "persistent://acme/ns/allowed-partition-0",
	"non-persistent://acme/ns/allowed",
	"persistent://acme/ns/forbidden", "acme/ns/forbidden", "persistent://acme/other/allowed",
	"persistent://acme/cluster/ns/allowed", "acme/ns/allowed-partition-", "acme/ns/allowed-partition-01",
	"persistent://acme/ns/allowed\xff", "acme//ns/allowed", "persistent://acme/ns/allowed/x", "",
	"allowed", "persistent://acme/ns/allowed-partition-1-partition-x",
}

// reallyAllowed: the pool's names that Pulsar reads as the allowed topic (or a partition of it).
var reallyAllowed = map[string]bool{
	"persistent://acme/ns/allowed": true, "acme/ns/allowed": true, "persistent://acme/ns/allowed-partition-0": true,
	"non-persistent://acme/ns/allowed": true,
}

// reallyAllowedTopic: a topic of reallyAllowed, a partition of it, or a coordinator alice may
// reach (lookup on the coordinators' topic covers every partition index Pulsar reads: 0 to
// MaxInt32). Mangled names a broker still reads as the allowed topic count too: a domain in
// another case (Pulsar's equalsIgnoreCase), another partition index Pulsar reads.
func reallyAllowedTopic(topic string) bool {
	if idx, ok := strings.CutPrefix(topic, edge.CoordinatorAssignTopic+"-partition-"); ok {
		return pulsarIndex(idx)
	}
	if reallyAllowed[topic] {
		return true
	}
	rest := topic
	if domain, r, ok := strings.Cut(topic, "://"); ok {
		if !strings.EqualFold(domain, "persistent") && !strings.EqualFold(domain, "non-persistent") {
			return false
		}
		rest = r
	}
	if rest == "acme/ns/allowed" {
		return true
	}
	idx, ok := strings.CutPrefix(rest, "acme/ns/allowed-partition-")
	return ok && pulsarIndex(idx)
}

// pulsarIndex reports whether Pulsar reads idx as a partition index: decimal, no sign, no
// leading zero, within an int32.
func pulsarIndex(idx string) bool {
	n, err := strconv.ParseInt(idx, 10, 32)
	return err == nil && n >= 0 && strconv.FormatInt(n, 10) == idx
}

// coordinatorPool: tc_id values, among them ids a broker reads as another coordinator.
var coordinatorPool = []uint64{0, 1, 7, math.MaxInt32, math.MaxInt32 + 1, 1<<32 | 1, math.MaxUint64}

// recordConn is a net.Conn that keeps what is written to it.
type recordConn struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *recordConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(b)
}
func (c *recordConn) Close() error { return nil }

func (c *recordConn) frames(t testing.TB) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	b := c.out.Bytes()
	for len(b) > 0 {
		span, _, err := frame.Limits{}.Scan(b)
		if err != nil || len(b) < span.Size {
			t.Fatalf("the proxy wrote a broken frame: %v", err)
		}
		out = append(out, bytes.Clone(span.Command(b)))
		b = b[span.Size:]
	}
	c.out.Reset()
	return out
}

// filterHarness is alice's direct session reduced to its client rules.
type filterHarness struct {
	s                  *session
	toBroker, toClient *recordConn
	filter             forward.Filter
}

func newFilterHarness(t testing.TB) *filterHarness {
	p, err := authz.ParsePolicy([]byte(attackPolicy))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(testConfig(), nil, noTargets{}, NewMetrics(prometheus.NewRegistry()), zerolog.Nop())
	reg := prometheus.NewRegistry()
	srv.SetSecurity(Security{Edge: edge.New(edge.Config{Policy: staticPolicy{p}, Metrics: authz.NewMetrics(reg)}), Metrics: authn.NewMetrics(reg)})
	s := &session{srv: srv, identity: authn.Identity{Role: "alice"}}
	h := &filterHarness{s: s, toBroker: &recordConn{}, toClient: &recordConn{}}
	lists := s.topicLists()
	h.filter = s.upstreamFilter(forward.NewSink(h.toBroker, nil), forward.NewSink(h.toClient, nil), nil, lists)
	return h
}

// run applies the rules to one command as the pipe does: peek, then the filter for watched
// types. It returns the commands that reach the broker and whether the session goes on.
func (h *filterHarness) run(t testing.TB, command []byte) (toBroker [][]byte, goesOn bool) {
	typ, err := frame.PeekType(command)
	if err != nil {
		return nil, false // the pipe ends the session on a frame it cannot peek
	}
	v := forward.Pass
	if edge.Inspected(typ) {
		v = h.filter(typ, command)
	}
	out := h.toBroker.frames(t)
	if v == forward.Pass {
		out = append(out, command)
	}
	return out, v != forward.End
}

// checkBrokerActs fails when a broker would act on a topic other than the allowed one, or
// on a command no client may send.
func checkBrokerActs(t testing.TB, sent []byte, reached [][]byte) {
	t.Helper()
	for _, cmd := range reached {
		typ, action, topics, ok := brokerActsOn(cmd)
		if !ok {
			continue // a broker refuses the frame
		}
		if edge.Refused(typ) {
			t.Fatalf("sent %x: the broker got %v, which no client may send", sent, typ)
		}
		if edge.ChecksTopics(typ) && len(topics) == 0 && typ != pb.BaseCommand_ADD_PARTITION_TO_TXN && typ != pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN {
			t.Fatalf("sent %x: the broker got %v without a topic", sent, typ)
		}
		for _, topic := range topics {
			if !reallyAllowedTopic(topic) {
				t.Fatalf("sent %x: the broker got %v and would %s %q", sent, typ, action, topic)
			}
		}
	}
}

// genCommand builds a command of a random type with random sub-messages, then perhaps
// mangles its encoding the ways a lenient decoder tolerates.
func genCommand(r *rand.Rand) []byte {
	topic := func() *string { return proto.String(topicPool[r.IntN(len(topicPool))]) }
	cmd := &pb.BaseCommand{}
	types := []int32{0, 1, 41, 69, 1000}
	for v := range pb.BaseCommand_Type_name {
		types = append(types, v)
	}
	slices.Sort(types)
	typ := pb.BaseCommand_Type(types[r.IntN(len(types))])
	cmd.Type = typ.Enum()
	subs := []func(){
		func() {
			cmd.Producer = &pb.CommandProducer{Topic: topic(), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}
		},
		func() { cmd.Subscribe = subscribeOn(*topic(), 2) },
		func() {
			cmd.LookupTopic = &pb.CommandLookupTopic{Topic: topic(), RequestId: proto.Uint64(3)}
		},
		func() {
			cmd.PartitionMetadata = &pb.CommandPartitionedTopicMetadata{Topic: topic(), RequestId: proto.Uint64(4)}
		},
		func() { cmd.GetSchema = &pb.CommandGetSchema{Topic: topic(), RequestId: proto.Uint64(5)} },
		func() {
			cmd.GetOrCreateSchema = &pb.CommandGetOrCreateSchema{Topic: topic(), RequestId: proto.Uint64(6),
				Schema: &pb.Schema{Name: proto.String("s"), SchemaData: []byte("{}"), Type: pb.Schema_Json.Enum()}}
		},
		func() {
			cmd.AddPartitionToTxn = &pb.CommandAddPartitionToTxn{RequestId: proto.Uint64(7), Partitions: []string{*topic(), *topic()}}
		},
		func() {
			cmd.AddSubscriptionToTxn = &pb.CommandAddSubscriptionToTxn{RequestId: proto.Uint64(8),
				Subscription: []*pb.Subscription{{Topic: topic(), Subscription: proto.String("s")}}}
		},
		func() { cmd.Send = &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)} },
		func() { cmd.Flow = &pb.CommandFlow{ConsumerId: proto.Uint64(2), MessagePermits: proto.Uint32(10)} },
		func() {
			cmd.GetTopicsOfNamespace = &pb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(9), Namespace: proto.String("acme/ns")}
		},
		func() {
			cmd.Connect = &pb.CommandConnect{ClientVersion: proto.String("x"), ProtocolVersion: proto.Int32(21)}
		},
		func() {
			cmd.EndTxnOnPartition = &pb.CommandEndTxnOnPartition{RequestId: proto.Uint64(10), Topic: topic(), TxnAction: pb.TxnAction_COMMIT.Enum()}
		},
		func() { cmd.Ping = &pb.CommandPing{} },
		func() {
			cmd.NewTxn = &pb.CommandNewTxn{RequestId: proto.Uint64(11), TcId: proto.Uint64(coordinatorPool[r.IntN(len(coordinatorPool))])}
		},
		func() {
			cmd.TcClientConnectRequest = &pb.CommandTcClientConnectRequest{RequestId: proto.Uint64(12),
				TcId: proto.Uint64(coordinatorPool[r.IntN(len(coordinatorPool))])}
		},
	}
	for range r.IntN(4) {
		subs[r.IntN(len(subs))]()
	}
	b, err := proto.Marshal(cmd)
	if err != nil {
		b, _ = proto.MarshalOptions{AllowPartial: true}.Marshal(cmd)
	}
	for range r.IntN(3) {
		b = mangle(r, b, topic)
	}
	return b
}

// mangle changes an encoding in one of the ways an attacker would.
func mangle(r *rand.Rand, b []byte, topic func() *string) []byte {
	sub := func(n protowire.Number, fields []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), fields)
	}
	topicField := func(num protowire.Number) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), *topic())
	}
	switch r.IntN(9) {
	case 0: // a second type field
		return protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), uint64(r.IntN(70)))
	case 1: // a sub-message of a checked type appended again, with another topic
		n := []protowire.Number{4, 5, 23, 21}[r.IntN(4)]
		return append(b, sub(n, topicField(1))...)
	case 2: // field number 0 inside a producer
		return append(b, sub(5, append(topicField(1), 0x00, 0x00))...)
	case 3: // a topic under a tag wider than 32 bits
		t := protowire.AppendVarint(nil, 1<<35|1<<3|2)
		return append(b, sub(5, protowire.AppendString(t, *topic()))...)
	case 4: // the topic field under another wire type
		return append(b, sub(4, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7))...)
	case 5: // a group
		return append(b, 0x1b, 0x1c)
	case 6: // truncated
		if len(b) > 1 {
			return b[:r.IntN(len(b))]
		}
	case 7: // a random byte changed
		if len(b) > 0 {
			b = slices.Clone(b)
			b[r.IntN(len(b))] = byte(r.IntN(256))
		}
	case 8: // the type field first, over-long
		return append([]byte{0x08, 0x80 | byte(r.IntN(70)), 0x80, 0x00}, b...)
	}
	return b
}

func TestClientRulesDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	forwarded := 0
	for i := 0; i < 20000; i++ {
		h := newFilterHarness(t)
		cmd := genCommand(r)
		reached, _ := h.run(t, cmd)
		checkBrokerActs(t, cmd, reached)
		forwarded += len(reached)
	}
	if forwarded < 1000 {
		t.Fatalf("only %d of 20000 generated commands reached the broker: the generator is too narrow", forwarded)
	}
}

// What a well-behaved client sends goes through, so the rules are not merely closed.
func TestClientRulesLetClientsWork(t *testing.T) {
	for _, cmd := range []*pb.BaseCommand{
		producerOn(allowedTopic, 1),
		{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: subscribeOn("acme/ns/allowed-partition-3", 2)},
		{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String(allowedTopic), RequestId: proto.Uint64(3)}},
		{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}},
		{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{ConsumerId: proto.Uint64(2), AckType: pb.CommandAck_Individual.Enum()}},
		{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(9), Namespace: proto.String("acme/ns")}},
		{Type: pb.BaseCommand_NEW_TXN.Enum(), NewTxn: &pb.CommandNewTxn{RequestId: proto.Uint64(4)}},
		{Type: pb.BaseCommand_NEW_TXN.Enum(), NewTxn: &pb.CommandNewTxn{RequestId: proto.Uint64(5), TcId: proto.Uint64(1), TxnTtlSeconds: proto.Uint64(60000)}},
		{Type: pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST.Enum(), TcClientConnectRequest: &pb.CommandTcClientConnectRequest{RequestId: proto.Uint64(6), TcId: proto.Uint64(7)}},
		{Type: pb.BaseCommand_ADD_PARTITION_TO_TXN.Enum(), AddPartitionToTxn: &pb.CommandAddPartitionToTxn{RequestId: proto.Uint64(7), Partitions: []string{allowedTopic + "-partition-0"}}},
		{Type: pb.BaseCommand_END_TXN.Enum(), EndTxn: &pb.CommandEndTxn{RequestId: proto.Uint64(8), TxnAction: pb.TxnAction_ABORT.Enum()}},
	} {
		h := newFilterHarness(t)
		b := mustMarshal(cmd)
		reached, goesOn := h.run(t, b)
		if len(reached) != 1 || !goesOn {
			t.Fatalf("%v: %d frames reached the broker (session goes on: %v)", cmd.GetType(), len(reached), goesOn)
		}
		got, err := frame.Decode(reached[0])
		if err != nil || !proto.Equal(got, cmd) {
			t.Fatalf("%v reached the broker as %v (%v)", cmd, got, err)
		}
	}
}

// FuzzClientRules: whatever the bytes, nothing a broker would act on outside the policy gets
// through. Seeds are generated commands.
func FuzzClientRules(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 64 {
		f.Add(genCommand(r))
	}
	f.Fuzz(func(t *testing.T, cmd []byte) {
		h := newFilterHarness(t)
		reached, _ := h.run(t, cmd)
		checkBrokerActs(t, cmd, reached)
	})
}

// FuzzDirectPipe runs the real forwarding loop with the client rules over a stream of frames
// delivered in three pieces, and compares what reaches the broker with the rules applied
// frame by frame (filterHarness): split frames, frames the rules drop or replace, and the
// frame that ends the session must all come out exactly the same.
func FuzzDirectPipe(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 3))
	for range 16 {
		var seed []byte
		for range 1 + r.IntN(5) {
			c := genCommand(r)
			if len(c) > 255 {
				c = c[:255]
			}
			seed = append(append(seed, byte(len(c))), c...)
		}
		f.Add(seed, uint16(r.IntN(200)), uint16(r.IntN(400)))
	}
	// Big frames (an empty command marks the next one big): a padded SEND puts the pipe into
	// head reads, then a padded PRODUCER on a forbidden topic must still be refused.
	send, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}})
	producer, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(forbiddenTopic), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(2)}})
	var big []byte
	for _, c := range [][]byte{send, producer, send} {
		big = append(append(big, 0, byte(len(c))), c...)
	}
	f.Add(big, uint16(1000), uint16(30000))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint16) {
		stream, frames := framesOf(data)
		if len(frames) == 0 {
			return
		}
		want := referenceForwarding(t, frames)

		in, srcConn := loopback.Pair(t)
		dstConn, out := loopback.Pair(t)
		h := newFilterHarness(t)
		toBroker := forward.NewSink(dstConn, nil)
		lists := h.s.topicLists()
		p := forward.New(forward.Config{Src: srcConn, Dst: toBroker, Limits: frame.ClientLimits(frame.DefaultMaxFrameSize), Buffers: forward.NewBuffers(),
			Frames: prometheus.NewCounter(prometheus.CounterOpts{Name: "f"}), Bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"}),
			Filter: h.s.upstreamFilter(toBroker, forward.NewSink(h.toClient, nil), nil, lists), Watch: edge.Inspected})
		done := make(chan struct{})
		go func() {
			p.Run()
			dstConn.Close()
			srcConn.Close()
			close(done)
		}()
		a, b := min(int(cut1), len(stream)), min(int(cut1)+int(cut2), len(stream))
		for _, piece := range [][]byte{stream[:a], stream[a:b], stream[b:]} {
			in.Write(piece)
		}
		in.(*net.TCPConn).CloseWrite()
		out.SetReadDeadline(time.Now().Add(10 * time.Second))
		var got bytes.Buffer
		got.ReadFrom(out)
		<-done
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("the pipe forwarded %x\nframe by frame: %x", got.Bytes(), want)
		}
	})
}

// framesOf turns fuzz input (length-prefixed commands) into a stream of frames; a SEND gets
// a few payload bytes, as its frames carry. An empty command makes the next frame big, so
// the pipe's head reads are reached: a SEND gets a 70 KiB payload (more than a read buffer), any other command an
// unknown field of 20 KiB (which a broker's decoder skips).
func framesOf(data []byte) (stream []byte, frames [][]byte) {
	big := false
	for len(data) > 0 {
		n := min(int(data[0]), len(data)-1)
		cmd := data[1 : 1+n]
		data = data[1+n:]
		if len(cmd) == 0 {
			big = true
			continue
		}
		t, err := frame.PeekType(cmd)
		isSend := err == nil && t == pb.BaseCommand_SEND
		if big && !isSend {
			cmd = protowire.AppendBytes(protowire.AppendTag(slices.Clone(cmd), 1000, protowire.BytesType), make([]byte, 20<<10))
		}
		fr := rawFrame(cmd)
		if isSend {
			fr = append(fr, 0x0e, 0x01, 0, 0, 0, 0)
			if big {
				fr = append(fr, make([]byte, 70<<10)...)
			}
			total := len(fr) - 4
			fr[0], fr[1], fr[2], fr[3] = byte(total>>24), byte(total>>16), byte(total>>8), byte(total)
		}
		big = false
		frames = append(frames, fr)
		stream = append(stream, fr...)
	}
	return stream, frames
}

// referenceForwarding applies the rules to each frame in turn and returns the bytes the
// broker should receive.
func referenceForwarding(t *testing.T, frames [][]byte) []byte {
	h := newFilterHarness(t)
	var want []byte
	for _, fr := range frames {
		span, _, _ := frame.Limits{}.Scan(fr)
		command := span.Command(fr)
		typ, err := frame.PeekType(command)
		if err != nil {
			break
		}
		v := forward.Pass
		if edge.Inspected(typ) {
			v = h.filter(typ, command)
		}
		h.toBroker.mu.Lock()
		want = append(want, h.toBroker.out.Bytes()...)
		h.toBroker.out.Reset()
		h.toBroker.mu.Unlock()
		if v == forward.End {
			break
		}
		if v == forward.Pass {
			want = append(want, fr...)
		}
	}
	return want
}

// FuzzHandshake sends arbitrary first bytes to a real session server with authentication
// on: nothing may crash or hang it, and a CONNECT that decodes with a proxy-only field set
// is always refused.
func FuzzHandshake(f *testing.F) {
	good := mustMarshal(connectCmd(withToken("x")))
	forged := mustMarshal(connectCmd(func(c *pb.CommandConnect) { c.OriginalPrincipal = proto.String("admin") }))
	for _, seed := range [][]byte{rawFrame(good), rawFrame(forged), rawFrame(mustMarshal(frame.Ping())), {0, 0, 0, 1}, {}} {
		f.Add(seed)
	}
	sec, _ := testSecurity(f, "guest", attackPolicy)
	cfg := testConfig()
	cfg.HandshakeTimeout = time.Second
	srv := NewServer(cfg, fakeResolver(func(*pb.BaseCommand) (*pb.BaseCommand, error) { return nil, errFuzzNoBroker }), noTargets{},
		NewMetrics(prometheus.NewRegistry()), zerolog.Nop())
	srv.SetSecurity(sec)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go srv.Serve(ln)
	f.Cleanup(func() { srv.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		first, err := readRawFrame(c)
		if err != nil {
			return
		}
		cmd, err := readCommandOf(data)
		if err != nil || cmd.GetConnect() == nil || cmd.GetType() != pb.BaseCommand_CONNECT || forgedProxyField(cmd.GetConnect()) == "" {
			return
		}
		got, err := frame.Decode(first)
		if err != nil || got.GetType() != pb.BaseCommand_ERROR {
			t.Fatalf("a forged CONNECT was answered %v", got)
		}
	})
}

var errFuzzNoBroker = errors.New("no broker in this test")

// readCommandOf decodes the first frame's command of data.
func readCommandOf(data []byte) (*pb.BaseCommand, error) {
	cmd, err := readRawFrame(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return frame.Decode(cmd)
}

// A transaction coordinator is reached (TC_CLIENT_CONNECT_REQUEST) and a transaction opened on
// it (NEW_TXN) only by a role that may look up the coordinator's topic; a denied one is
// answered with an error for its request id and the session goes on.
func TestClientRulesTransactionCoordinator(t *testing.T) {
	for _, c := range []struct {
		role    string
		tcID    uint64
		allowed bool
	}{
		{"alice", 0, true}, {"alice", 3, true},
		{"bob", 0, false},                   // no rule for bob
		{"alice", 1<<32 | 3, false},         // a broker reads it as coordinator 3
		{"alice", math.MaxInt32 + 1, false}, // and this one as a negative index
	} {
		for _, cmd := range []*pb.BaseCommand{
			{Type: pb.BaseCommand_NEW_TXN.Enum(), NewTxn: &pb.CommandNewTxn{RequestId: proto.Uint64(21), TcId: proto.Uint64(c.tcID)}},
			{Type: pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST.Enum(), TcClientConnectRequest: &pb.CommandTcClientConnectRequest{
				RequestId: proto.Uint64(21), TcId: proto.Uint64(c.tcID)}},
		} {
			h := newFilterHarness(t)
			h.s.identity = authn.Identity{Role: c.role}
			reached, goesOn := h.run(t, mustMarshal(cmd))
			if !goesOn || (len(reached) == 1) != c.allowed || len(reached) > 1 {
				t.Fatalf("%s as %s, coordinator %d: %d frames reached the broker (session goes on: %v); allowed: %v",
					cmd.GetType(), c.role, c.tcID, len(reached), goesOn, c.allowed)
			}
			if c.allowed {
				continue
			}
			answers := h.toClient.frames(t)
			if len(answers) != 1 {
				t.Fatalf("%s denied with %d answers", cmd.GetType(), len(answers))
			}
			a, err := frame.Decode(answers[0])
			if err != nil || a.GetError().GetRequestId() != 21 || a.GetError().GetError() != pb.ServerError_AuthorizationError {
				t.Fatalf("%s denied with %v (%v)", cmd.GetType(), a, err)
			}
		}
	}
}
