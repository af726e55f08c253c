package edge

import (
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// rule is what the binary planes do with one type of client command. The rules are an
// allow-list: a type the table does not name is refused on every plane.
type rule uint8

const (
	// refuse: a command no client sends here (a second CONNECT, answers, broker-to-broker
	// transaction commands, types unknown to the proxy).
	refuse rule = iota
	// pass: the command acts only on producers, consumers or transactions the connection
	// created (by ids), which were checked when created. A direct session forwards it
	// undecoded (the hot path costs one type peek); a multiplexed one reads it strictly
	// first, since a broker closes the whole shared connection on one it cannot read.
	pass
	// keepAlive: PING and PONG. Forwarded on a direct session (they are the client's and
	// its broker's); answered by the proxy where it is the client's peer.
	keepAlive
	// checkTopics: the command names topics (PRODUCER, SUBSCRIBE, lookups, schemas,
	// transaction partitions) or a transaction coordinator (by its topic). Decoded, every
	// topic the broker will act on is checked, and it goes on re-encoded.
	checkTopics
	// listTopics: the command opens or closes a namespace's topic list. The namespace is
	// checked, and the list the broker sends back is filtered (TopicLists).
	listTopics
	// renewal: AUTH_RESPONSE, an answer to the proxy's own credential challenge or to the
	// broker's.
	renewal
)

// rules is indexed by command type; the zero value is refuse.
var rules = func() (r [pb.BaseCommand_TOPIC_MIGRATED + 1]rule) {
	for _, t := range []pb.BaseCommand_Type{
		pb.BaseCommand_SEND, pb.BaseCommand_ACK, pb.BaseCommand_FLOW, pb.BaseCommand_UNSUBSCRIBE,
		pb.BaseCommand_CLOSE_PRODUCER, pb.BaseCommand_CLOSE_CONSUMER,
		pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES, pb.BaseCommand_CONSUMER_STATS, pb.BaseCommand_SEEK,
		pb.BaseCommand_GET_LAST_MESSAGE_ID, pb.BaseCommand_END_TXN,
	} {
		r[t] = pass
	}
	r[pb.BaseCommand_PING], r[pb.BaseCommand_PONG] = keepAlive, keepAlive
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
func ruleFor(t pb.BaseCommand_Type) rule {
	if t < 0 || int(t) >= len(rules) {
		return refuse
	}
	return rules[t]
}

// Inspected reports whether a framed direct session must hand commands of type t to Command;
// all others (the hot path: SEND, ACK, FLOW, PING...) go on undecoded.
func Inspected(t pb.BaseCommand_Type) bool {
	r := ruleFor(t)
	return r != pass && r != keepAlive
}

// servedOnLookup names what a lookup connection serves; everything else is refused there.
var servedOnLookup = map[pb.BaseCommand_Type]bool{
	pb.BaseCommand_LOOKUP: true, pb.BaseCommand_PARTITIONED_METADATA: true, pb.BaseCommand_GET_SCHEMA: true,
	pb.BaseCommand_GET_TOPICS_OF_NAMESPACE: true, pb.BaseCommand_WATCH_TOPIC_LIST: true,
	pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE: true,
	pb.BaseCommand_PING:                   true, pb.BaseCommand_PONG: true, pb.BaseCommand_AUTH_RESPONSE: true,
}

// rateLimited names the discovery requests a role's lookup rate counts (authz.Limit).
var rateLimited = map[pb.BaseCommand_Type]bool{
	pb.BaseCommand_LOOKUP: true, pb.BaseCommand_PARTITIONED_METADATA: true, pb.BaseCommand_GET_SCHEMA: true,
	pb.BaseCommand_GET_TOPICS_OF_NAMESPACE: true, pb.BaseCommand_WATCH_TOPIC_LIST: true,
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

// CoordinatorAssignTopic is the partitioned topic whose partition N stands for transaction
// coordinator N: the broker that owns the partition runs the coordinator.
const CoordinatorAssignTopic = "persistent://pulsar/system/transaction_coordinator_assign"

// CoordinatorTopic is the topic of coordinator id, whose owner runs it, or "" (denied) for
// an id a broker would read as another one: it takes the partition index as a 32-bit int.
func CoordinatorTopic(id uint64) string { return coordinatorTopic(id) }

func coordinatorTopic(id uint64) string {
	if id > math.MaxInt32 {
		return ""
	}
	return CoordinatorAssignTopic + "-partition-" + strconv.FormatUint(id, 10)
}

// ownField is the field of cmd's own sub-message (the field whose number is its type).
func ownField(cmd *pb.BaseCommand) protoreflect.FieldDescriptor {
	return cmd.ProtoReflect().Descriptor().Fields().ByNumber(protowire.Number(cmd.GetType()))
}

// hasOwnMessage reports whether cmd carries the sub-message of its type. BaseCommand has
// them all optional, so a frame without it decodes; a broker reading it would fail.
func hasOwnMessage(cmd *pb.BaseCommand) bool {
	fd := ownField(cmd)
	return fd != nil && fd.Message() != nil && cmd.ProtoReflect().Has(fd)
}

// canonical is what a broker acts on for a command's type (which has its own sub-message):
// the type and that sub-message, without the other sub-messages and unknown fields at the
// top level. Forwarding it re-encoded means the broker reads exactly what the proxy checked,
// however leniently it parses: duplicate or conflicting fields, other sub-messages, odd
// encodings all collapse into one form.
func canonical(cmd *pb.BaseCommand) *pb.BaseCommand {
	fd := ownField(cmd)
	out := &pb.BaseCommand{Type: cmd.GetType().Enum()}
	out.ProtoReflect().Set(fd, cmd.ProtoReflect().Get(fd))
	dropUnknown(out.ProtoReflect())
	return out
}

// dropUnknown clears the unknown fields of m and of every message in it. A broker skips most
// of them, but its parser throws on one of the group wire types and closes the connection:
// on a shared connection, under every client on it. (The protocol's messages are those of
// Pulsar's own definition: nothing the broker acts on is dropped.)
func dropUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				dropUnknown(v.List().Get(i).Message())
			}
		case !fd.IsMap():
			dropUnknown(v.Message())
		}
		return true
	})
}

// forLookupService is a lookup connection's request as the proxy sends it from its own
// control connections: the canonical command without unknown fields in its sub-message and
// without the fields only a proxy sets (original_principal, original_auth_*: the control
// connection already names the client's role), so a client can neither speak as another
// principal nor hide fields the proxy does not read.
func forLookupService(cmd *pb.BaseCommand) {
	m, fd := cmd.ProtoReflect(), ownField(cmd)
	sub := proto.Clone(m.Get(fd).Message().Interface())
	sub.ProtoReflect().SetUnknown(nil)
	m.Set(fd, protoreflect.ValueOfMessage(sub.ProtoReflect()))
	if l := cmd.GetLookupTopic(); l != nil {
		l.OriginalPrincipal, l.OriginalAuthData, l.OriginalAuthMethod = nil, nil, nil
	}
	if p := cmd.GetPartitionMetadata(); p != nil {
		p.OriginalPrincipal, p.OriginalAuthData, p.OriginalAuthMethod = nil, nil, nil
	}
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

// FailureFor is the answer a client expects when the proxy refuses a request: the command's
// own failure form where it has one (lookups), else ERROR for its request id.
func FailureFor(cmd *pb.BaseCommand, code pb.ServerError, msg string) *pb.BaseCommand {
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

// Refused reports whether every binary plane refuses commands of type t (for tests that
// model what a broker acts on).
func Refused(t pb.BaseCommand_Type) bool { return ruleFor(t) == refuse }

// ChecksTopics reports whether commands of type t name topics the edge checks.
func ChecksTopics(t pb.BaseCommand_Type) bool { return ruleFor(t) == checkTopics }
