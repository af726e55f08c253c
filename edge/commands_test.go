package edge

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

const testPolicy = `
rules:
  - {roles: [alice], resources: ["acme/a/*"], actions: [lookup, produce, consume]}
  - {roles: [alice], resources: ["persistent://pulsar/system/transaction_coordinator_assign"], actions: [lookup]}
limits:
  - {roles: [limited], lookupsPerSecond: 2, lookupBurst: 2}
`

const (
	allowedTopic = "persistent://acme/a/t"
	hiddenTopic  = "persistent://acme/b/secret"
)

type staticPolicy struct{ p *authz.Policy }

func (s staticPolicy) Policy() *authz.Policy { return s.p }

func newTestEdge(t testing.TB, policy string) *Edge {
	t.Helper()
	if policy == "" {
		return New(Config{})
	}
	p, err := authz.ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Policy: staticPolicy{p}})
}

var alice = authn.Identity{Role: "alice", Method: "token"}

// binaryPlanes are the planes a Pulsar frame arrives on, in the order of the table's columns.
var binaryPlanes = [3]Plane{Lookup, Direct, Multiplexed}

// outcomes is what each binary plane makes of one type of command naming only what alice may
// use (allowedTopic, namespace acme/a, coordinator 0): {lookup, direct, multiplexed}.
// Every type the table does not name is refused on a lookup connection and closes a direct
// or multiplexed session.
var outcomes = map[pb.BaseCommand_Type][3]Outcome{
	pb.BaseCommand_SEND:                              {Refuse, Forward, Forward},
	pb.BaseCommand_ACK:                               {Refuse, Forward, Forward},
	pb.BaseCommand_FLOW:                              {Refuse, Forward, Forward},
	pb.BaseCommand_UNSUBSCRIBE:                       {Refuse, Forward, Forward},
	pb.BaseCommand_CLOSE_PRODUCER:                    {Refuse, Forward, Forward},
	pb.BaseCommand_CLOSE_CONSUMER:                    {Refuse, Forward, Forward},
	pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES: {Refuse, Forward, Forward},
	pb.BaseCommand_CONSUMER_STATS:                    {Refuse, Forward, Forward},
	pb.BaseCommand_SEEK:                              {Refuse, Forward, Forward},
	pb.BaseCommand_GET_LAST_MESSAGE_ID:               {Refuse, Forward, Forward},
	pb.BaseCommand_END_TXN:                           {Refuse, Forward, Forward},
	pb.BaseCommand_PING:                              {Answer, Forward, Answer},
	pb.BaseCommand_PONG:                              {Answer, Forward, Answer},
	pb.BaseCommand_PRODUCER:                          {Refuse, Forward, Forward},
	pb.BaseCommand_SUBSCRIBE:                         {Refuse, Forward, Forward},
	pb.BaseCommand_LOOKUP:                            {Forward, Forward, Forward},
	pb.BaseCommand_PARTITIONED_METADATA:              {Forward, Forward, Forward},
	pb.BaseCommand_GET_SCHEMA:                        {Forward, Forward, Forward},
	pb.BaseCommand_GET_OR_CREATE_SCHEMA:              {Refuse, Forward, Forward},
	pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST:         {Refuse, Forward, Forward},
	pb.BaseCommand_NEW_TXN:                           {Refuse, Forward, Forward},
	pb.BaseCommand_ADD_PARTITION_TO_TXN:              {Refuse, Forward, Forward},
	pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN:           {Refuse, Forward, Forward},
	pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:           {Forward, Forward, Forward},
	pb.BaseCommand_WATCH_TOPIC_LIST:                  {Forward, Forward, Forward},
	pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:            {Forward, Forward, Forward},
	pb.BaseCommand_AUTH_RESPONSE:                     {Answer, Forward, Answer},
}

// deniedOutcomes is what becomes of the topic-naming commands when they name what alice may
// not use (hiddenTopic, namespace acme/b, coordinator 1<<31).
var deniedOutcomes = map[pb.BaseCommand_Type][3]Outcome{
	pb.BaseCommand_PRODUCER:                  {Refuse, Refuse, Refuse},
	pb.BaseCommand_SUBSCRIBE:                 {Refuse, Refuse, Refuse},
	pb.BaseCommand_LOOKUP:                    {Refuse, Refuse, Refuse},
	pb.BaseCommand_PARTITIONED_METADATA:      {Refuse, Refuse, Refuse},
	pb.BaseCommand_GET_SCHEMA:                {Refuse, Refuse, Refuse},
	pb.BaseCommand_GET_OR_CREATE_SCHEMA:      {Refuse, Refuse, Refuse},
	pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST: {Refuse, Refuse, Refuse},
	pb.BaseCommand_NEW_TXN:                   {Refuse, Refuse, Refuse},
	pb.BaseCommand_ADD_PARTITION_TO_TXN:      {Refuse, Refuse, Refuse},
	pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN:   {Refuse, Refuse, Refuse},
	pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:   {Refuse, Refuse, Refuse},
	pb.BaseCommand_WATCH_TOPIC_LIST:          {Refuse, Refuse, Refuse},
}

// TestEveryCommandTypeOnEveryBinaryPlane is the decision table: every BaseCommand type, on
// each binary plane, naming what the role may use and what it may not.
func TestEveryCommandTypeOnEveryBinaryPlane(t *testing.T) {
	e := newTestEdge(t, testPolicy)
	for _, v := range pb.BaseCommand_Type_value {
		typ := pb.BaseCommand_Type(v)
		for _, allowed := range []bool{true, false} {
			want, ok := outcomes[typ]
			if !ok {
				want = [3]Outcome{Refuse, Close, Close}
			}
			if d, named := deniedOutcomes[typ]; named && !allowed {
				want = d
			}
			raw := wellFormed(t, typ, allowed)
			for i, p := range binaryPlanes {
				d := e.Command(alice, p, typ, raw)
				if d.Outcome != want[i] {
					t.Errorf("%v (allowed resource %v) on %v: %v (%s), want %v", typ, allowed, p, d.Outcome, d.Reason, want[i])
				}
				if (d.Outcome == Refuse || d.Outcome == Close) && d.Reply == nil {
					t.Errorf("%v on %v: refused without an answer for the client", typ, p)
				}
			}
		}
	}
}

// wellFormed is a command of type typ with its sub-message and every required field set
// (so that only the rules decide), naming allowed or forbidden resources.
func wellFormed(t testing.TB, typ pb.BaseCommand_Type, allowed bool) []byte {
	t.Helper()
	cmd := &pb.BaseCommand{Type: typ.Enum()}
	m := cmd.ProtoReflect()
	if fd := m.Descriptor().Fields().ByNumber(protowire.Number(typ)); fd != nil && fd.Message() != nil {
		sub := m.Mutable(fd).Message()
		fillRequired(sub)
		nameResources(sub, allowed)
	}
	b, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatalf("%v: %v", typ, err)
	}
	return b
}

// fillRequired sets every required field of m, recursively, to a plain value.
func fillRequired(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Cardinality() != protoreflect.Required {
			continue
		}
		switch fd.Kind() {
		case protoreflect.MessageKind:
			fillRequired(m.Mutable(fd).Message())
		case protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		case protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte("x")))
		case protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(fd.Enum().Values().Get(0).Number()))
		case protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		default:
			m.Set(fd, m.NewField(fd)) // zero of its numeric kind
		}
	}
}

// nameResources points the topic, namespace and coordinator fields of a sub-message at what
// alice may (or may not) use.
func nameResources(sub protoreflect.Message, allowed bool) {
	topic, ns, tc := allowedTopic, "acme/a", uint64(0)
	if !allowed {
		topic, ns, tc = hiddenTopic, "acme/b", 1<<31
	}
	fields := sub.Descriptor().Fields()
	for _, name := range []protoreflect.Name{"topic", "namespace", "tc_id", "partitions", "subscription"} {
		fd := fields.ByName(name)
		if fd == nil {
			continue
		}
		switch {
		case name == "namespace":
			sub.Set(fd, protoreflect.ValueOfString(ns))
		case name == "tc_id":
			sub.Set(fd, protoreflect.ValueOfUint64(tc))
		case name == "partitions" && fd.IsList():
			sub.Mutable(fd).List().Append(protoreflect.ValueOfString(topic))
		case name == "topic" && fd.Kind() == protoreflect.StringKind && !fd.IsList():
			sub.Set(fd, protoreflect.ValueOfString(topic))
		case name == "subscription" && fd.IsList(): // ADD_SUBSCRIPTION_TO_TXN
			s := &pb.Subscription{Topic: proto.String(topic), Subscription: proto.String("s")}
			sub.Mutable(fd).List().Append(protoreflect.ValueOfMessage(s.ProtoReflect()))
		}
	}
}

func decided(t *testing.T, e *Edge, id authn.Identity, p Plane, cmd *pb.BaseCommand) Decision {
	t.Helper()
	b, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return e.Command(id, p, cmd.GetType(), b)
}

// A shared connection closes on a command a broker cannot read; a multiplexed session must
// refuse it before it gets there, and only that session ends. On a direct session it is the
// client's own connection: the hot path does not read it.
func TestInvalidCommandsCloseOnlyTheSession(t *testing.T) {
	e := newTestEdge(t, "")
	flowNoPermits := protowire.AppendTag(nil, 11, protowire.BytesType)
	flowNoPermits = protowire.AppendBytes(flowNoPermits, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7)) // consumer_id only
	endTxnNoRequest := protowire.AppendTag(nil, 60, protowire.BytesType)
	endTxnNoRequest = protowire.AppendBytes(endTxnNoRequest, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)) // txnid_least_bits only
	for _, tc := range []struct {
		name string
		typ  pb.BaseCommand_Type
		raw  []byte
	}{
		{"FLOW without message_permits", pb.BaseCommand_FLOW, append(typeField(pb.BaseCommand_FLOW), flowNoPermits...)},
		{"END_TXN without request_id", pb.BaseCommand_END_TXN, append(typeField(pb.BaseCommand_END_TXN), endTxnNoRequest...)},
		{"SEND without its sub-message", pb.BaseCommand_SEND, typeField(pb.BaseCommand_SEND)},
		{"ACK with a truncated sub-message", pb.BaseCommand_ACK, append(typeField(pb.BaseCommand_ACK), 0x52, 0x10, 0x08)},
	} {
		if d := e.Command(alice, Multiplexed, tc.typ, tc.raw); d.Outcome != Close || d.Reply == nil {
			t.Errorf("%s on a multiplexed session: %v, want close with an answer", tc.name, d.Outcome)
		}
		if d := e.Command(alice, Direct, tc.typ, tc.raw); d.Outcome != Forward || d.Command != nil {
			t.Errorf("%s on a direct session: %v, want forwarded undecoded", tc.name, d.Outcome)
		}
	}
}

func typeField(t pb.BaseCommand_Type) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(t))
}

// What a multiplexed session sends on is the strict reading re-encoded: other sub-messages
// and a field given twice (a reader that keeps the last, or merges, or fails) are gone.
func TestMultiplexedForwardsTheCanonicalForm(t *testing.T) {
	e := newTestEdge(t, "")
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(),
		Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2)},
		Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(4)}}
	raw, _ := proto.Marshal(send)
	raw = protowire.AppendTag(raw, 6, protowire.BytesType) // SEND's sub-message again: producer_id 9
	raw = protowire.AppendBytes(raw, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 9))
	d := e.Command(alice, Multiplexed, pb.BaseCommand_SEND, raw)
	if d.Outcome != Forward || !d.Rewritten {
		t.Fatalf("%v rewritten %v, want forwarded re-encoded", d.Outcome, d.Rewritten)
	}
	if d.Command.Flow != nil || d.Command.GetSend().GetProducerId() != 9 || d.Command.GetSend().GetSequenceId() != 2 {
		t.Fatalf("forwarded %v, want the SEND alone as Go merges it", d.Command)
	}
}

// Only a proxy sets original_principal; on the framed planes a client that does is cut off,
// on a lookup connection the fields are dropped (the control connection names the role).
func TestForgedOriginalPrincipal(t *testing.T) {
	e := newTestEdge(t, testPolicy)
	forged := func() *pb.BaseCommand {
		return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(allowedTopic), RequestId: proto.Uint64(5), OriginalPrincipal: proto.String("admin")}}
	}
	for _, p := range []Plane{Direct, Multiplexed} {
		if d := decided(t, e, alice, p, forged()); d.Outcome != Close || d.Reason != ReasonForged {
			t.Errorf("%v: %v %s, want close (%s)", p, d.Outcome, d.Reason, ReasonForged)
		}
	}
	d := decided(t, e, alice, Lookup, forged())
	if d.Outcome != Forward || d.Command.GetLookupTopic().OriginalPrincipal != nil {
		t.Errorf("lookup: %v, original_principal %q; want forwarded without it", d.Outcome, d.Command.GetLookupTopic().GetOriginalPrincipal())
	}
}

// Under a policy a client's topics_hash never reaches a broker (it would answer "unchanged"
// for a guess of the full list); without one it goes on, as the client sent it.
func TestTopicsHashStrippedUnderPolicy(t *testing.T) {
	lists := []*pb.BaseCommand{
		{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
			RequestId: proto.Uint64(1), Namespace: proto.String("acme/a"), TopicsHash: proto.String("0badc0de")}},
		{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: &pb.CommandWatchTopicList{
			RequestId: proto.Uint64(1), WatcherId: proto.Uint64(1), Namespace: proto.String("acme/a"),
			TopicsPattern: proto.String(".*"), TopicsHash: proto.String("0badc0de")}},
	}
	hashOf := func(c *pb.BaseCommand) *string {
		if g := c.GetGetTopicsOfNamespace(); g != nil {
			return g.TopicsHash
		}
		return c.GetWatchTopicList().TopicsHash
	}
	policed, open := newTestEdge(t, testPolicy), newTestEdge(t, "")
	for _, cmd := range lists {
		for _, p := range binaryPlanes {
			if d := decided(t, policed, alice, p, cmd); d.Outcome != Forward || hashOf(d.Command) != nil {
				t.Errorf("%v on %v under a policy: %v, hash %v; want forwarded without the hash", cmd.GetType(), p, d.Outcome, hashOf(d.Command))
			}
			if d := decided(t, open, alice, p, cmd); d.Outcome != Forward || hashOf(d.Command) == nil {
				t.Errorf("%v on %v without a policy: %v, hash dropped; want it kept", cmd.GetType(), p, d.Outcome)
			}
		}
	}
}

// A role's lookup rate is one bucket for every plane.
func TestLookupRateSharedByEveryPlane(t *testing.T) {
	now := time.Unix(1000, 0)
	p, err := authz.ParsePolicy([]byte(`
rules:
  - {roles: [alice, limited], resources: ["*/*/*"], actions: [lookup, produce]}
limits:
  - {roles: [limited], lookupsPerSecond: 2, lookupBurst: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := New(Config{Policy: staticPolicy{p}, Now: func() time.Time { return now }})
	limited := authn.Identity{Role: "limited"}
	lookup := &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String(allowedTopic), RequestId: proto.Uint64(1)}}
	// The burst of 2: one on a lookup connection, one in a direct session; then nothing, on
	// any plane, HTTP included, until the bucket refills.
	for i, p := range []Plane{Lookup, Direct} {
		if d := decided(t, e, limited, p, lookup); d.Outcome != Forward {
			t.Fatalf("lookup %d on %v: %v, want forward within the burst", i, p, d.Outcome)
		}
	}
	for _, p := range []Plane{Multiplexed, Direct, Lookup} {
		d := decided(t, e, limited, p, lookup)
		if d.Outcome != Refuse || d.Reason != ReasonRateLimited || d.Reply.GetLookupTopicResponse().GetError() != pb.ServerError_TooManyRequests {
			t.Errorf("over the rate on %v: %v %s, want refused TooManyRequests", p, d.Outcome, d.Reason)
		}
	}
	if d := e.Route(limited, "GET", mustURL(t, "/lookup/v2/topic/persistent/acme/a/t")); d.Outcome != Refuse || d.Status != 429 {
		t.Errorf("HTTP lookup over the rate: %v %d, want 429", d.Outcome, d.Status)
	}
	now = now.Add(time.Second) // two tokens back
	if d := decided(t, e, limited, Multiplexed, lookup); d.Outcome != Forward {
		t.Errorf("after a second: %v, want forward", d.Outcome)
	}
	// A command that is no lookup takes no token.
	producer := &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{Topic: proto.String(allowedTopic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}}
	if d := decided(t, e, alice, Direct, producer); d.Outcome != Forward {
		t.Errorf("PRODUCER: %v", d.Outcome)
	}
}

// A namespace's topic list is refused where the role holds no lookup grant at all.
func TestTopicListNeedsAGrantInTheNamespace(t *testing.T) {
	e := newTestEdge(t, testPolicy)
	for _, tc := range []struct {
		ns   string
		want Outcome
	}{
		{"acme/a", Forward}, {"acme/a/", Forward}, {"acme/b", Refuse}, {"acme", Refuse}, {"acme/cluster/a", Refuse},
		{"", Refuse}, {"acme//a", Refuse}, {"pulsar/system", Forward}, // the coordinators' grant is in pulsar/system
	} {
		cmd := &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
			RequestId: proto.Uint64(1), Namespace: proto.String(tc.ns)}}
		for _, p := range binaryPlanes {
			if d := decided(t, e, alice, p, cmd); d.Outcome != tc.want {
				t.Errorf("namespace %q on %v: %v, want %v", tc.ns, p, d.Outcome, tc.want)
			}
		}
	}
}

// A SEND's message metadata is read on a multiplexed session: a broker that must read it (an
// encrypted namespace's, a chunk's) closes the shared connection on one it cannot.
func TestMultiplexedSendPayloadIsRead(t *testing.T) {
	e := newTestEdge(t, "")
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}
	whole, err := frame.AppendPayloadCommand(nil, send, nil, &pb.MessageMetadata{
		ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}, []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	span, _, _ := frame.Limits{}.Scan(whole)
	command, payload := span.Command(whole), whole[span.CommandEnd():]
	noProducerName := append(append([]byte{}, payload[:10]...), 0x10, 0x01, 0x18, 0x01) // sequence_id, publish_time only
	noProducerName[9] = 4
	for _, tc := range []struct {
		name    string
		payload []byte
		want    Outcome
	}{
		{"a message", payload, Forward},
		{"no payload section", nil, Close},
		{"another magic", append([]byte{0x0e, 0x03}, payload[2:]...), Close},
		{"metadata size past the end", append(append([]byte{}, payload[:6]...), 0xff, 0xff, 0xff, 0xff), Close},
		{"metadata without a required field", noProducerName, Close},
	} {
		if d := e.Frame(alice, Multiplexed, pb.BaseCommand_SEND, command, tc.payload); d.Outcome != tc.want {
			t.Errorf("%s on a multiplexed session: %v, want %v", tc.name, d.Outcome, tc.want)
		}
		if d := e.Frame(alice, Direct, pb.BaseCommand_SEND, command, tc.payload); d.Outcome != Forward {
			t.Errorf("%s on a direct session: %v, want forwarded unread", tc.name, d.Outcome)
		}
	}
}

// A routed connection decides its discovery requests as a lookup connection does and every
// other command as a multiplexed one: no command type gets a third set of rules.
func TestRoutedDecidesAsLookupOrMultiplexed(t *testing.T) {
	routed, lookup, multiplexed := newTestEdge(t, testPolicy), newTestEdge(t, testPolicy), newTestEdge(t, testPolicy)
	for _, v := range pb.BaseCommand_Type_value {
		typ := pb.BaseCommand_Type(v)
		as, other := multiplexed, Multiplexed
		if servedOnLookup[typ] && typ != pb.BaseCommand_PING && typ != pb.BaseCommand_PONG && typ != pb.BaseCommand_AUTH_RESPONSE {
			as, other = lookup, Lookup
		}
		for _, allowed := range []bool{true, false} {
			raw := wellFormed(t, typ, allowed)
			got, want := routed.Command(alice, Routed, typ, raw), as.Command(alice, other, typ, raw)
			if got.Outcome != want.Outcome || got.Reason != want.Reason {
				t.Errorf("%v (allowed %v) on a routed connection: %v %q, want %v %q as on %v", typ, allowed, got.Outcome, got.Reason, want.Outcome, want.Reason, other)
			}
			// The broker gets the same bytes (a multiplexed session forwards canonical ones
			// as they are, a routed one re-encodes what it read).
			if got.Outcome == Forward && !bytes.Equal(forwarded(t, got, raw), forwarded(t, want, raw)) {
				t.Errorf("%v (allowed %v): a routed connection forwards other bytes than a %v one", typ, allowed, other)
			}
		}
	}
}

// A routed connection's LOOKUP goes through the lookup service as the proxy's own request,
// the fields only a proxy sets dropped, as on a lookup connection (a multiplexed one refuses
// them: there the command would reach a broker as the client sent it).
func TestRoutedLookupDropsProxyFields(t *testing.T) {
	e := newTestEdge(t, "")
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(allowedTopic), RequestId: proto.Uint64(1), OriginalPrincipal: proto.String("root")}}
	d := decided(t, e, alice, Routed, cmd)
	if d.Outcome != Forward || d.Command.GetLookupTopic().OriginalPrincipal != nil {
		t.Errorf("routed LOOKUP naming original_principal: %v %v, want forwarded without it", d.Outcome, d.Command)
	}
}

// forwarded is the command a session sends on for decision d on raw.
func forwarded(t *testing.T, d Decision, raw []byte) []byte {
	t.Helper()
	if !d.Rewritten {
		return raw
	}
	b, err := frame.AppendCommand(nil, d.Command)
	if err != nil {
		t.Fatal(err)
	}
	return b[frame.HeaderSize:]
}

// A multiplexed session's SEND, ACK or FLOW already in its canonical form goes on as it came
// (nothing decoded or re-encoded); one in another form is re-encoded; a routed session's is
// always decoded, since it routes by what it reads.
func TestCanonicalBytesGoAsTheyCame(t *testing.T) {
	e := newTestEdge(t, testPolicy)
	canonical := wellFormed(t, pb.BaseCommand_SEND, true)
	// The same SEND with producer_id written twice: Go reads the last, so it decodes alike.
	sub := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 9)
	sub = append(sub, canonical[4:]...)
	twice := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.BaseCommand_SEND))
	twice = protowire.AppendBytes(protowire.AppendTag(twice, 6, protowire.BytesType), sub)
	payload := sendPayload(t, &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)})
	for _, tc := range []struct {
		name      string
		plane     Plane
		command   []byte
		rewritten bool
	}{
		{"canonical, multiplexed", Multiplexed, canonical, false},
		{"a field twice, multiplexed", Multiplexed, twice, true},
		{"canonical, routed", Routed, canonical, true},
	} {
		for name, d := range map[string]Decision{
			"Command": e.Command(alice, tc.plane, pb.BaseCommand_SEND, tc.command),
			"Frame":   e.Frame(alice, tc.plane, pb.BaseCommand_SEND, tc.command, payload),
		} {
			if d.Outcome != Forward || d.Rewritten != tc.rewritten || (tc.rewritten && d.Command.GetSend() == nil) {
				t.Errorf("%s, %s: %v rewritten %v (%v), want forwarded, rewritten %v", tc.name, name, d.Outcome, d.Rewritten, d.Command, tc.rewritten)
			}
			if d.Rewritten && !bytes.Equal(forwarded(t, d, tc.command), canonical) {
				t.Errorf("%s, %s: re-encoded to % x, want % x", tc.name, name, forwarded(t, d, tc.command), canonical)
			}
		}
	}
}

// sendPayload is a SEND's payload section with metadata md and a small message.
func sendPayload(t testing.TB, md *pb.MessageMetadata) []byte {
	t.Helper()
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}
	whole, err := frame.AppendPayloadCommand(nil, send, nil, md, []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	span, _, _ := frame.Limits{}.Scan(whole)
	return whole[span.CommandEnd():]
}

// On any bytes of a pass-rule command (SEND, ACK, FLOW...), mutated from a well-formed one, a
// multiplexed session (which forwards canonical bytes as they came) decides as a routed one
// (which decodes every command) and forwards the same bytes. (Adopted from an attacker's
// review.)
func TestMultiplexedDecidesAsRoutedOnAnyBytes(t *testing.T) {
	e := newTestEdge(t, testPolicy)
	rng := rand.New(rand.NewPCG(3, 4))
	asTheyCame := 0
	for v := range pb.BaseCommand_Type_name {
		typ := pb.BaseCommand_Type(v)
		if ruleFor(typ) != pass {
			continue
		}
		raw := wellFormed(t, typ, true)
		for k := 0; k < 3000; k++ {
			b := mutated(rng, raw)
			if pt, err := frame.PeekType(b); err != nil || pt != typ {
				continue
			}
			m, r := e.Command(alice, Multiplexed, typ, b), e.Command(alice, Routed, typ, b)
			if !m.Rewritten {
				asTheyCame++
			}
			if m.Outcome != r.Outcome || m.Reason != r.Reason {
				t.Fatalf("%v % x: multiplexed %v %q, routed %v %q", typ, b, m.Outcome, m.Reason, r.Outcome, r.Reason)
			}
			if m.Outcome == Forward && !bytes.Equal(forwarded(t, m, b), forwarded(t, r, b)) {
				t.Fatalf("%v % x: a multiplexed session forwards other bytes than a routed one", typ, b)
			}
		}
	}
	t.Logf("%d mutated commands went as they came", asTheyCame)
}

// mutated is b with one or two random edits.
func mutated(rng *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	for k := rng.IntN(2) + 1; k > 0 && len(b) > 0; k-- {
		i := rng.IntN(len(b))
		switch rng.IntN(5) {
		case 0:
			b[i] ^= 1 << rng.IntN(8)
		case 1:
			b = append(b[:i:i], b[i+1:]...)
		case 2:
			b = append(b[:i:i], append([]byte{byte(rng.Uint32())}, b[i:]...)...)
		case 3: // a run doubled
			j := i + rng.IntN(len(b)-i+1)
			b = append(b[:j:j], append(bytes.Clone(b[i:j]), b[j:]...)...)
		case 4:
			b[i] = []byte{0x00, 0x01, 0x7f, 0x80, 0xff}[rng.IntN(5)]
		}
	}
	return b
}
