package frame

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The protocol names the field request_id in every command that has one, whatever its
// number, so one reflective accessor serves requests and answers alike. Only decoded
// commands (lookup mode, control and multiplexed connections) go through here, never the
// forwarding path.

// RequestID returns the request_id of the command's own sub-message, if it has one.
func RequestID(cmd *pb.BaseCommand) (uint64, bool) {
	sub, fd := requestIDField(cmd)
	if fd == nil || !sub.Has(fd) {
		return 0, false
	}
	return sub.Get(fd).Uint(), true
}

// SetRequestID sets the request_id of the command's sub-message; false if it has none.
func SetRequestID(cmd *pb.BaseCommand, id uint64) bool {
	sub, fd := requestIDField(cmd)
	if fd == nil {
		return false
	}
	sub.Set(fd, protoreflect.ValueOfUint64(id))
	return true
}

func requestIDField(cmd *pb.BaseCommand) (protoreflect.Message, protoreflect.FieldDescriptor) {
	m := cmd.ProtoReflect()
	sfd := m.Descriptor().Fields().ByNumber(protowire.Number(cmd.GetType()))
	if sfd == nil || sfd.Message() == nil || !m.Has(sfd) {
		return nil, nil
	}
	sub := m.Mutable(sfd).Message()
	fd := sub.Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.Uint64Kind {
		return nil, nil
	}
	return sub, fd
}
