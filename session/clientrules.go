package session

import (
	"errors"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// clientRule is what a direct session does with one type of command from its client, when
// the proxy inspects frames (authentication or authorization on). The rules are an
// allow-list: a type the table does not name is refused.
type clientRule uint8

const (
	// refuse: a command no client sends to a broker (a second CONNECT, answers, broker-to-
	// broker transaction commands, types unknown to the proxy). The session ends.
	refuse clientRule = iota
	// pass: the command acts only on producers, consumers, watchers or transactions this
	// connection created (by ids), which were checked when created. Forwarded undecoded: the
	// hot path (SEND, ACK, FLOW) costs one type peek.
	pass
	// checkTopics: the command names topics (PRODUCER, SUBSCRIBE, lookups, schemas,
	// transaction partitions) or a transaction coordinator (by its topic). Decoded, every
	// topic the broker will act on is checked, and the command is re-encoded, so the broker
	// reads exactly what was checked.
	checkTopics
	// listTopics: the command opens or closes a namespace's topic list (GET_TOPICS_OF_NAMESPACE,
	// WATCH_TOPIC_LIST, WATCH_TOPIC_LIST_CLOSE). Re-encoded; the topics in the broker's
	// answers are filtered by the policy.
	listTopics
	// renewal: an answer to the proxy's own credential challenge, or to the broker's.
	renewal
)

// clientRules is indexed by command type; the zero value is refuse.
var clientRules = func() (r [pb.BaseCommand_TOPIC_MIGRATED + 1]clientRule) {
	for _, t := range []pb.BaseCommand_Type{
		pb.BaseCommand_SEND, pb.BaseCommand_ACK, pb.BaseCommand_FLOW, pb.BaseCommand_UNSUBSCRIBE,
		pb.BaseCommand_CLOSE_PRODUCER, pb.BaseCommand_CLOSE_CONSUMER, pb.BaseCommand_PING, pb.BaseCommand_PONG,
		pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES, pb.BaseCommand_CONSUMER_STATS, pb.BaseCommand_SEEK,
		pb.BaseCommand_GET_LAST_MESSAGE_ID, pb.BaseCommand_END_TXN,
	} {
		r[t] = pass
	}
	for t := range topicChecks {
		r[t] = checkTopics
	}
	r[pb.BaseCommand_GET_TOPICS_OF_NAMESPACE] = listTopics
	r[pb.BaseCommand_WATCH_TOPIC_LIST] = listTopics
	r[pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE] = listTopics
	r[pb.BaseCommand_AUTH_RESPONSE] = renewal
	return r
}()

// ruleFor is the rule for a peeked type.
func ruleFor(t pb.BaseCommand_Type) clientRule {
	if t < 0 || int(t) >= len(clientRules) {
		return refuse
	}
	return clientRules[t]
}

// topicCheck names, for a command of rule checkTopics, the action it needs and the topics in
// the sub-message the broker reads for that type (never another sub-message of the frame).
type topicCheck struct {
	action authz.Action
	topics func(*pb.BaseCommand) []string
}

var topicChecks = map[pb.BaseCommand_Type]topicCheck{
	pb.BaseCommand_PRODUCER:  {authz.ActionProduce, func(c *pb.BaseCommand) []string { return []string{c.GetProducer().GetTopic()} }},
	pb.BaseCommand_SUBSCRIBE: {authz.ActionConsume, func(c *pb.BaseCommand) []string { return []string{c.GetSubscribe().GetTopic()} }},
	pb.BaseCommand_LOOKUP:    {authz.ActionLookup, func(c *pb.BaseCommand) []string { return []string{c.GetLookupTopic().GetTopic()} }},
	pb.BaseCommand_PARTITIONED_METADATA: {authz.ActionLookup, func(c *pb.BaseCommand) []string {
		return []string{c.GetPartitionMetadata().GetTopic()}
	}},
	pb.BaseCommand_GET_SCHEMA: {authz.ActionLookup, func(c *pb.BaseCommand) []string { return []string{c.GetGetSchema().GetTopic()} }},
	// Registering a schema changes the topic: a producer's right.
	pb.BaseCommand_GET_OR_CREATE_SCHEMA: {authz.ActionProduce, func(c *pb.BaseCommand) []string {
		return []string{c.GetGetOrCreateSchema().GetTopic()}
	}},
	// A coordinator is reached, and a transaction opened on it, only by a role that may look up
	// the coordinator's topic, which a client in lookup mode must do to find it; the broker's
	// ownership checks then keep a transaction to the role that opened it.
	pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST: {authz.ActionLookup, func(c *pb.BaseCommand) []string {
		return []string{coordinatorTopic(c.GetTcClientConnectRequest().GetTcId())}
	}},
	pb.BaseCommand_NEW_TXN: {authz.ActionLookup, func(c *pb.BaseCommand) []string {
		return []string{coordinatorTopic(c.GetNewTxn().GetTcId())}
	}},
	pb.BaseCommand_ADD_PARTITION_TO_TXN: {authz.ActionProduce, func(c *pb.BaseCommand) []string {
		return c.GetAddPartitionToTxn().GetPartitions()
	}},
	pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN: {authz.ActionConsume, func(c *pb.BaseCommand) []string {
		var topics []string
		for _, s := range c.GetAddSubscriptionToTxn().GetSubscription() {
			topics = append(topics, s.GetTopic())
		}
		return topics
	}},
}

// coordinatorAssignTopic is the partitioned topic whose partition N stands for transaction
// coordinator N: the broker that owns the partition runs the coordinator.
const coordinatorAssignTopic = "persistent://pulsar/system/transaction_coordinator_assign"

// coordinatorTopic is the topic of coordinator id, or "" (denied) for an id a broker would
// read as another one: it takes the partition index as a 32-bit int.
func coordinatorTopic(id uint64) string {
	if id > math.MaxInt32 {
		return ""
	}
	return coordinatorAssignTopic + "-partition-" + strconv.FormatUint(id, 10)
}

var errNoSubMessage = errors.New("the command's own sub-message is missing")

// canonical decodes a client command strictly and encodes again only what a broker acts on
// for its type: the type and that type's own sub-message (the field whose number is the
// type), without unknown fields at the top level. The broker then reads exactly what the
// proxy checked, however leniently it parses: duplicate or conflicting fields, other
// sub-messages, odd encodings all collapse into one canonical form. It returns the decoded
// command (the canonical one) and the frame to forward.
func canonical(t pb.BaseCommand_Type, command []byte) (*pb.BaseCommand, []byte, error) {
	cmd, err := frame.Decode(command)
	if err != nil {
		return nil, nil, err
	}
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protowire.Number(t))
	if fd == nil || !m.Has(fd) {
		return nil, nil, errNoSubMessage
	}
	out := &pb.BaseCommand{Type: t.Enum()}
	out.ProtoReflect().Set(fd, m.Get(fd))
	b, err := frame.AppendCommand(nil, out)
	if err != nil {
		return nil, nil, err
	}
	return out, b, nil
}

// hasOriginalFields reports whether a lookup command carries the fields only a proxy sets,
// with which a client could ask a broker to act as another principal.
func hasOriginalFields(cmd *pb.BaseCommand) bool {
	if l := cmd.GetLookupTopic(); l != nil {
		return l.OriginalPrincipal != nil || l.OriginalAuthData != nil || l.OriginalAuthMethod != nil
	}
	if p := cmd.GetPartitionMetadata(); p != nil {
		return p.OriginalPrincipal != nil || p.OriginalAuthData != nil || p.OriginalAuthMethod != nil
	}
	return false
}

// failureFor is the answer a client expects when the proxy refuses a request: the command's
// own failure form where it has one (lookups), else ERROR for its request id.
func failureFor(cmd *pb.BaseCommand, code pb.ServerError, msg string) *pb.BaseCommand {
	id, _ := frame.RequestID(cmd)
	switch cmd.GetType() {
	case pb.BaseCommand_LOOKUP:
		return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: proto.Uint64(id), Response: pb.CommandLookupTopicResponse_Failed.Enum(), Error: code.Enum(), Message: proto.String(msg),
		}}
	case pb.BaseCommand_PARTITIONED_METADATA:
		return &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
			RequestId: proto.Uint64(id), Response: pb.CommandPartitionedTopicMetadataResponse_Failed.Enum(), Error: code.Enum(), Message: proto.String(msg),
		}}
	}
	return frame.Error(id, code, msg)
}

// hasOwnMessage reports whether cmd carries the sub-message of its type.
func hasOwnMessage(cmd *pb.BaseCommand) bool {
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protowire.Number(cmd.GetType()))
	return fd != nil && m.Has(fd)
}

// lookupRequest is the request a lookup-mode client's command becomes towards a broker: the
// type and its own sub-message only, without unknown fields and without the fields only a
// proxy sets (original_principal, original_auth_*: the pooled connection already names the
// client's role), so a client can neither speak as another principal nor hide fields the
// proxy does not read.
func lookupRequest(cmd *pb.BaseCommand) *pb.BaseCommand {
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protowire.Number(cmd.GetType()))
	out := &pb.BaseCommand{Type: cmd.GetType().Enum()}
	if fd == nil || !m.Has(fd) {
		return out
	}
	sub := proto.Clone(m.Get(fd).Message().Interface())
	sub.ProtoReflect().SetUnknown(nil)
	out.ProtoReflect().Set(fd, protoreflect.ValueOfMessage(sub.ProtoReflect()))
	if l := out.GetLookupTopic(); l != nil {
		l.OriginalPrincipal, l.OriginalAuthData, l.OriginalAuthMethod = nil, nil, nil
	}
	if p := out.GetPartitionMetadata(); p != nil {
		p.OriginalPrincipal, p.OriginalAuthData, p.OriginalAuthMethod = nil, nil, nil
	}
	return out
}
