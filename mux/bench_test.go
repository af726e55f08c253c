package mux

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// BenchmarkUpSend is the mapping of one SEND as the proxy does it: the id rewritten in the
// command's bytes, the frame's head built.
func BenchmarkUpSend(b *testing.B) {
	m, c := NewMapper(), NewClient()
	acceptedProducer(b, m, c, 1)
	send := sendCmd(1, 7)
	payload := make([]byte, 1024)
	b.ReportAllocs()
	for b.Loop() {
		out, err := m.UpBytes(c, send)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := EncodeBytes(out, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpSendDecoded is the same through the decoding path, for comparison.
func BenchmarkUpSendDecoded(b *testing.B) {
	m, c := NewMapper(), NewClient()
	acceptedProducer(b, m, c, 1)
	send := sendCmd(1, 7)
	payload := make([]byte, 1024)
	b.ReportAllocs()
	for b.Loop() {
		cmd := mustDecode(send)
		if err := m.Up(c, cmd); err != nil {
			b.Fatal(err)
		}
		if _, err := Encode(cmd, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDownMapping is the mapping back of the broker's data-path commands as a
// connection's reader does it: a MESSAGE for a consumer and a SEND_RECEIPT for a producer,
// their ids rewritten into a reused buffer.
func BenchmarkDownMapping(b *testing.B) {
	m, c := NewMapper(), NewClient()
	for range 50 { // other clients' ids: the mapping's tables are not trivially small
		acceptedProducer(b, m, NewClient(), 1)
	}
	producer, consumer := acceptedProducer(b, m, c, 1), acceptedConsumer(b, m, c, 2)
	receipt, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: proto.Uint64(producer), SequenceId: proto.Uint64(4242),
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(12345), EntryId: proto.Uint64(678)}, HighestSequenceId: proto.Uint64(4242)}})
	message := messageFrame(b, consumer, 0)[frame.HeaderSize:]
	for _, bc := range []struct {
		name    string
		command []byte
	}{{"receipt", receipt}, {"message", message}} {
		b.Run(bc.name, func(b *testing.B) {
			dst := make([]byte, 0, 256)
			b.ReportAllocs()
			for b.Loop() {
				out, owner, err := m.AppendDown(dst[:0], bc.command)
				if err != nil || owner != c {
					b.Fatal(err)
				}
				dst = out
			}
		})
	}
}
