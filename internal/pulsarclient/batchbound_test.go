package pulsarclient

import (
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// TestBatchCountIsTheProducersWord: a batch's count comes from whoever produced it. One the
// data cannot hold (negative, huge: a panic or gigabytes allocated before) or over
// maxBatchMessages makes the entry unreadable; many empty messages are charged for what they
// cost the proxy, not their zero bytes.
func TestBatchCountIsTheProducersWord(t *testing.T) {
	empty := func(n int) []byte {
		smd, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(0)})
		var out []byte
		for range n {
			out = binary.BigEndian.AppendUint32(out, uint32(len(smd)))
			out = append(out, smd...)
		}
		return out
	}
	base := Message{ID: MessageID{BatchIndex: -1}}
	for _, c := range []struct {
		name string
		data []byte
		n    int
	}{
		{"negative", empty(1), -1},
		{"more than the data holds", empty(1), 1 << 30},
		{"over the bound", empty(maxBatchMessages + 1), maxBatchMessages + 1},
	} {
		if msgs, err := splitBatch(base, c.data, c.n, nil); err == nil {
			t.Errorf("%s: %d messages taken apart, want the entry unreadable", c.name, len(msgs))
		}
	}
	msgs, err := splitBatch(base, empty(1000), 1000, nil)
	if err != nil || len(msgs) != 1000 {
		t.Fatalf("1,000 empty messages: %d, %v", len(msgs), err)
	}
	if got := msgs[0].size; got < messageOverhead {
		t.Fatalf("an empty message is charged %d bytes, want at least %d", got, messageOverhead)
	}
}
