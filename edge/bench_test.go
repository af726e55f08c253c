package edge

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// BenchmarkMultiplexedSend is the edge's decision on a multiplexed session's SEND (command
// and payload section), as Go's client writes it (canonical: forwarded as it came) and with
// a field written twice (decoded and re-encoded). make bench-micro runs it.
func BenchmarkMultiplexedSend(b *testing.B) {
	e := newTestEdge(b, testPolicy)
	canonical, err := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(),
		Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(42), NumMessages: proto.Int32(1)}})
	if err != nil {
		b.Fatal(err)
	}
	sub := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 9)
	sub = append(sub, canonical[4:]...)
	twice := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.BaseCommand_SEND))
	twice = protowire.AppendBytes(protowire.AppendTag(twice, 6, protowire.BytesType), sub)
	payload := sendPayload(b, &pb.MessageMetadata{ProducerName: proto.String("standalone-0-1"), SequenceId: proto.Uint64(42),
		PublishTime: proto.Uint64(1764662400000), UncompressedSize: proto.Uint32(100)})
	for _, bc := range []struct {
		name    string
		command []byte
	}{{"canonical", canonical}, {"a-field-twice", twice}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d := e.Frame(alice, Multiplexed, pb.BaseCommand_SEND, bc.command, payload); d.Outcome != Forward {
					b.Fatal(d.Outcome)
				}
			}
		})
	}
}
