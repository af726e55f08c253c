// Package mux multiplexes many client sessions over a few broker connections: every
// identifier a client chooses and a broker scopes per connection is rewritten to a value
// unique on the broker connection on the way in, and back on the way out (see the table
// below); only the command part of a frame is re-encoded, the metadata and payload of SEND
// and MESSAGE go on as they came.
package mux

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// kind is a namespace of per-connection identifiers: a broker keeps one table of each per
// connection (ServerCnx's producers, consumers, topic-list watchers, and the request ids it
// answers by).
type kind uint8

const (
	producerID kind = iota
	consumerID
	watcherID
	requestID
	kinds
	// resourceID is TOPIC_MIGRATED's id: a producer's or a consumer's, as its
	// resource_type says.
	resourceID kind = 255
)

func (k kind) String() string {
	switch k {
	case producerID:
		return "producer"
	case consumerID:
		return "consumer"
	case watcherID:
		return "watcher"
	case requestID:
		return "request"
	}
	return "resource"
}

// role is what a command does with an identifier it carries.
type role uint8

const (
	create  role = iota // the client names a new producer/consumer/watcher (or repeats its creation)
	use                 // names one created before (from a client: one the broker accepted)
	release             // closes one: the mapping goes with it
	request             // a new request id, answered later
	answer              // the broker answers a request id; the mapping ends unless more answers follow
	revoke              // the broker closed one on its side: it waits for the client's new creation
)

// idField is one identifier field of a command's own sub-message.
type idField struct {
	name protoreflect.Name
	kind kind
	role role
}

func f(name protoreflect.Name, k kind, r role) idField { return idField{name, k, r} }

var (
	prodCreate = f("producer_id", producerID, create)
	prodUse    = f("producer_id", producerID, use)
	prodClose  = f("producer_id", producerID, release)
	prodGone   = f("producer_id", producerID, revoke)
	consCreate = f("consumer_id", consumerID, create)
	consUse    = f("consumer_id", consumerID, use)
	consClose  = f("consumer_id", consumerID, release)
	consGone   = f("consumer_id", consumerID, revoke)
	watchNew   = f("watcher_id", watcherID, create)
	watchUse   = f("watcher_id", watcherID, use)
	watchClose = f("watcher_id", watcherID, release)
	reqNew     = f("request_id", requestID, request)
	reqAnswer  = f("request_id", requestID, answer)
	migrated   = f("resource_id", resourceID, use)
)

// clientCommands is every command a client may send over a multiplexed connection, with
// the identifiers it carries (entity ids before the request id: an unknown entity refuses
// the command before a request id is taken). Derived from frame/pb's pulsar_api.proto and
// checked against it by TestTableCoversProto: every producer_id, consumer_id, watcher_id,
// request_id and resource_id of a sub-message is here or in brokerCommands.
var clientCommands = map[pb.BaseCommand_Type][]idField{
	pb.BaseCommand_PRODUCER:                          {prodCreate, reqNew},
	pb.BaseCommand_SEND:                              {prodUse},
	pb.BaseCommand_CLOSE_PRODUCER:                    {prodClose, reqNew},
	pb.BaseCommand_SUBSCRIBE:                         {consCreate, reqNew},
	pb.BaseCommand_ACK:                               {consUse, reqNew}, // request_id optional
	pb.BaseCommand_FLOW:                              {consUse},
	pb.BaseCommand_UNSUBSCRIBE:                       {consUse, reqNew},
	pb.BaseCommand_CLOSE_CONSUMER:                    {consClose, reqNew},
	pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES: {consUse},
	pb.BaseCommand_CONSUMER_STATS:                    {consUse, reqNew},
	pb.BaseCommand_SEEK:                              {consUse, reqNew},
	pb.BaseCommand_GET_LAST_MESSAGE_ID:               {consUse, reqNew},
	pb.BaseCommand_LOOKUP:                            {reqNew},
	pb.BaseCommand_PARTITIONED_METADATA:              {reqNew},
	pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:           {reqNew},
	pb.BaseCommand_GET_SCHEMA:                        {reqNew},
	pb.BaseCommand_GET_OR_CREATE_SCHEMA:              {reqNew},
	pb.BaseCommand_WATCH_TOPIC_LIST:                  {watchNew, reqNew},
	pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:            {watchClose, reqNew},
	pb.BaseCommand_NEW_TXN:                           {reqNew},
	pb.BaseCommand_ADD_PARTITION_TO_TXN:              {reqNew},
	pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN:           {reqNew},
	pb.BaseCommand_END_TXN:                           {reqNew},
	pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST:         {reqNew},
}

// brokerCommands is every command a broker sends a client, with the identifiers to map
// back. A broker's own CLOSE_PRODUCER/CLOSE_CONSUMER carry a request_id of the broker's
// (not an answer), left as it is; the id they close stays the client's (it recreates it
// under the same id) but is no longer accepted.
var brokerCommands = map[pb.BaseCommand_Type][]idField{
	pb.BaseCommand_SEND_RECEIPT:                     {prodUse},
	pb.BaseCommand_SEND_ERROR:                       {prodUse},
	pb.BaseCommand_PRODUCER_SUCCESS:                 {reqAnswer},
	pb.BaseCommand_CLOSE_PRODUCER:                   {prodGone},
	pb.BaseCommand_MESSAGE:                          {consUse},
	pb.BaseCommand_ACK_RESPONSE:                     {consUse, reqAnswer}, // request_id optional
	pb.BaseCommand_CLOSE_CONSUMER:                   {consGone},
	pb.BaseCommand_ACTIVE_CONSUMER_CHANGE:           {consUse},
	pb.BaseCommand_REACHED_END_OF_TOPIC:             {consUse},
	pb.BaseCommand_TOPIC_MIGRATED:                   {migrated},
	pb.BaseCommand_SUCCESS:                          {reqAnswer},
	pb.BaseCommand_ERROR:                            {reqAnswer},
	pb.BaseCommand_LOOKUP_RESPONSE:                  {reqAnswer},
	pb.BaseCommand_PARTITIONED_METADATA_RESPONSE:    {reqAnswer},
	pb.BaseCommand_CONSUMER_STATS_RESPONSE:          {reqAnswer},
	pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE:     {reqAnswer},
	pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE: {reqAnswer},
	pb.BaseCommand_GET_SCHEMA_RESPONSE:              {reqAnswer},
	pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE:    {reqAnswer},
	pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS:         {watchUse, reqAnswer},
	pb.BaseCommand_WATCH_TOPIC_UPDATE:               {watchUse},
	pb.BaseCommand_NEW_TXN_RESPONSE:                 {reqAnswer},
	pb.BaseCommand_ADD_PARTITION_TO_TXN_RESPONSE:    {reqAnswer},
	pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN_RESPONSE: {reqAnswer},
	pb.BaseCommand_END_TXN_RESPONSE:                 {reqAnswer},
	pb.BaseCommand_TC_CLIENT_CONNECT_RESPONSE:       {reqAnswer},
}

// connectionCommands belong to a connection, not to a client on it: the proxy answers them
// itself on each side (the handshake, keep-alive, the pooled connection's own credentials).
var connectionCommands = map[pb.BaseCommand_Type]bool{
	pb.BaseCommand_CONNECT: true, pb.BaseCommand_CONNECTED: true, pb.BaseCommand_PING: true,
	pb.BaseCommand_PONG: true, pb.BaseCommand_AUTH_CHALLENGE: true, pb.BaseCommand_AUTH_RESPONSE: true,
}

// brokerToBroker commands travel between brokers (a transaction coordinator and the topic
// owners), never on a client's connection; a client that sends one is refused.
var brokerToBroker = map[pb.BaseCommand_Type]bool{
	pb.BaseCommand_END_TXN_ON_PARTITION: true, pb.BaseCommand_END_TXN_ON_PARTITION_RESPONSE: true,
	pb.BaseCommand_END_TXN_ON_SUBSCRIPTION: true, pb.BaseCommand_END_TXN_ON_SUBSCRIPTION_RESPONSE: true,
}

// globalIDs are the *_id fields of commands that are not per connection: sequence ids are
// per producer (which the mapping already separates), transaction ids and coordinator ids
// are the cluster's, message ids (MessageIdData: ledger, entry) are positions in a topic.
var globalIDs = map[protoreflect.Name]bool{
	"message_id": true, "start_message_id": true, "last_message_id": true,
	"sequence_id": true, "highest_sequence_id": true, "last_sequence_id": true, "tc_id": true,
	"txnid_least_bits": true, "txnid_most_bits": true, "txnid_least_bits_of_low_watermark": true,
}

// acceptedBy is the broker's success answer to the creation of each kind of id; any other
// final answer (an ERROR) refuses it.
var acceptedBy = [requestID]pb.BaseCommand_Type{
	producerID: pb.BaseCommand_PRODUCER_SUCCESS, consumerID: pb.BaseCommand_SUCCESS,
	watcherID: pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS,
}

// moreAnswers reports whether an answer leaves its request open: a PRODUCER_SUCCESS with
// producer_ready=false (the producer waits for exclusive access) is followed by another.
func moreAnswers(cmd *pb.BaseCommand) bool {
	ps := cmd.GetProducerSuccess()
	return ps != nil && ps.ProducerReady != nil && !ps.GetProducerReady()
}
