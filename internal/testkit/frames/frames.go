// Package frames builds Pulsar frames for tests.
package frames

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Send is a SEND frame of producer 1 with sequence id seq and a payload of size bytes (each
// the byte seq), with its message metadata.
func Send(t testing.TB, size int, seq uint64) []byte {
	t.Helper()
	payload := bytes.Repeat([]byte{byte(seq)}, size)
	raw, err := frame.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}}, nil,
		&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1)}, payload)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
