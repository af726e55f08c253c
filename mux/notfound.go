package mux

import (
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// NotFound is the answer to a client command the mapping refused with ErrUnknownID: it
// names a producer, consumer or topic-list watcher the client does not have on the
// connection, or one whose creation the broker has not accepted (yet, or at all). It is what
// a broker answers for a producer, consumer or watcher it does not have, msg the message;
// nil where a broker answers nothing:
//   - a close (CLOSE_PRODUCER, CLOSE_CONSUMER, WATCH_TOPIC_LIST_CLOSE): SUCCESS, as for an
//     id that "was not registered on the connection";
//   - CONSUMER_STATS: its own response with ConsumerNotFound;
//   - UNSUBSCRIBE, SEEK, GET_LAST_MESSAGE_ID: ERROR MetadataError ("Consumer not found");
//   - an ACK with a request id: ERROR MetadataError too, where a broker sends nothing and the
//     client would wait for its receipt until its operation timeout;
//   - SEND, FLOW, REDELIVER_UNACKNOWLEDGED_MESSAGES, an ACK without a request id: nothing. A
//     broker sends no SEND_ERROR for a producer it lacks (it drops a SEND for one it closed
//     lately and closes the connection for any other), and a client takes a SEND_ERROR of
//     another kind than checksum, terminated topic or not allowed as a reason to drop its
//     connection; a SEND may be in flight when the producer is closed under the client (by
//     the broker, or by the proxy after a lost connection), so it is dropped as a broker
//     drops it, and the client's send timeout answers the message.
func NotFound(cmd *pb.BaseCommand, msg string) *pb.BaseCommand {
	id, hasID := frame.RequestID(cmd)
	switch cmd.GetType() {
	case pb.BaseCommand_CLOSE_PRODUCER, pb.BaseCommand_CLOSE_CONSUMER, pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
		return &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(id)}}
	case pb.BaseCommand_CONSUMER_STATS:
		return &pb.BaseCommand{Type: pb.BaseCommand_CONSUMER_STATS_RESPONSE.Enum(), ConsumerStatsResponse: &pb.CommandConsumerStatsResponse{
			RequestId: proto.Uint64(id), ErrorCode: pb.ServerError_ConsumerNotFound.Enum(), ErrorMessage: proto.String(msg)}}
	}
	if !hasID {
		return nil
	}
	return frame.Error(id, pb.ServerError_MetadataError, msg)
}
