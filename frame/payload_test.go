package frame

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// TestCheckSendPayloadRefusesUnknownGroups: message metadata with an unknown field of a group
// wire type, at the top or nested, is refused (a broker's parser throws on it and closes the
// connection); other unknown fields, which it skips, pass.
func TestCheckSendPayloadRefusesUnknownGroups(t *testing.T) {
	group := []byte{0xa3, 0x06, 0xa4, 0x06} // field 100: start group, end group
	varint := []byte{0xa0, 0x06, 0x01}      // field 100: a varint
	for _, c := range []struct {
		name    string
		set     func(md *pb.MessageMetadata)
		refused bool
	}{
		{"none", func(*pb.MessageMetadata) {}, false},
		{"a varint", func(md *pb.MessageMetadata) { md.ProtoReflect().SetUnknown(varint) }, false},
		{"a group", func(md *pb.MessageMetadata) { md.ProtoReflect().SetUnknown(group) }, true},
		{"a group in a property", func(md *pb.MessageMetadata) {
			kv := &pb.KeyValue{Key: proto.String("k"), Value: proto.String("v")}
			kv.ProtoReflect().SetUnknown(group)
			md.Properties = append(md.Properties, kv)
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}
			c.set(md)
			cmd := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}
			b, err := AppendPayloadCommand(nil, cmd, nil, md, []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewReader(bytes.NewReader(b), 0).ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			err = CheckSendPayload(f.Payload)
			if refused := errors.Is(err, ErrMalformed); refused != c.refused {
				t.Fatalf("CheckSendPayload: %v, want refused %v", err, c.refused)
			}
		})
	}
}
