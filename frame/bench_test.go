package frame

import (
	"bytes"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

func BenchmarkPeekType(b *testing.B) {
	cmd := unhex(b, goldens[3].command) // MESSAGE
	b.ReportAllocs()
	b.SetBytes(int64(len(cmd)))
	for b.Loop() {
		if _, err := PeekType(cmd); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFrame(b *testing.B) {
	for _, size := range []int{100, 4 << 10, 1 << 20} {
		fr, err := AppendPayloadCommand(nil, goldens[3].cmd, nil, testMetadata, bytes.Repeat([]byte{1}, size))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(byteSize(size), func(b *testing.B) {
			r := NewReader(&loopReader{b: fr}, 0)
			b.ReportAllocs()
			b.SetBytes(int64(len(fr)))
			for b.Loop() {
				if _, err := r.ReadFrame(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	cmd := unhex(b, goldens[3].command)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(cmd); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendPayloadCommand(b *testing.B) {
	data := bytes.Repeat([]byte{1}, 4<<10)
	cmd := &pb.BaseCommand{
		Type: pb.BaseCommand_SEND.Enum(),
		Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)},
	}
	buf := make([]byte, 0, 8<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var err error
		if buf, err = AppendPayloadCommand(buf[:0], cmd, nil, testMetadata, data); err != nil {
			b.Fatal(err)
		}
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
