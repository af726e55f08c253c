package frame

import (
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Constructors for the commands the proxy itself originates. Each call
// returns a new command the caller may modify.

// Connected answers a client's CONNECT. maxMessageSize <= 0 leaves the field
// out, and the client then assumes the protocol's default.
func Connected(serverVersion string, protocolVersion int32, maxMessageSize int32) *pb.BaseCommand {
	c := &pb.CommandConnected{
		ServerVersion:   proto.String(serverVersion),
		ProtocolVersion: proto.Int32(protocolVersion),
	}
	if maxMessageSize > 0 {
		c.MaxMessageSize = proto.Int32(maxMessageSize)
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: c}
}

// Error is the generic failure answer to the request requestID.
func Error(requestID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	return &pb.BaseCommand{
		Type: pb.BaseCommand_ERROR.Enum(),
		Error: &pb.CommandError{
			RequestId: proto.Uint64(requestID),
			Error:     code.Enum(),
			Message:   proto.String(message),
		},
	}
}

// Ping is a keep-alive probe; the peer answers with Pong.
func Ping() *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}}
}

// Pong answers a Ping.
func Pong() *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}}
}
