package mux

import (
	"bytes"
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// TestPooledFramesAtVarintBoundaries: ids on each side of every varint width (a client's and
// the connection's, which may differ in width either way) through the pooled frame as the
// data path builds it (newFrame, AppendUp or AppendDown, finish): each id reads back as
// mapped, the header's sizes count what is there, the payload is intact, and the answers
// find their way back to the client's own ids.
func TestPooledFramesAtVarintBoundaries(t *testing.T) {
	ids := []uint64{0, 1, 127, 128, 16383, 16384, 1<<21 - 1, 1 << 21, 1<<63 - 1, 1 << 63, 1<<64 - 1}
	offsets := []uint64{0, 126, 127, 16382, 16383, 1<<21 - 2} // where the connection's ids start
	payload := []byte{0x0e, 0x01, 1, 2, 3, 4, 0, 0, 0, 0, 'x', 'y'}
	var bp bufPool
	for _, off := range offsets {
		for _, own := range ids {
			m, c := NewMapper(), NewClient()
			m.next[producerID], m.next[requestID], m.next[consumerID] = off, off, off
			conn := acceptedProducer(t, m, c, own)

			send, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(own), SequenceId: proto.Uint64(own)}})
			fb := bp.newFrame(send, payload)
			b, err := m.AppendUp(fb.cmd(), c, send)
			if err != nil {
				t.Fatal(err)
			}
			f, err := fb.finish(b)
			if err != nil {
				t.Fatal(err)
			}
			whole := append(append([]byte(nil), f.Head...), f.Payload...)
			checkHeader(t, whole, len(f.Command()))
			got := mustDecode(f.Command()).GetSend()
			if got.GetProducerId() != conn || got.GetSequenceId() != own {
				t.Fatalf("ids from %d, own %d: sent %v, want producer %d", off, own, got, conn)
			}
			if !bytes.Equal(f.Payload, payload) {
				t.Fatalf("ids from %d, own %d: payload %x", off, own, f.Payload)
			}
			f.Release()

			checkReceiptBack(t, &bp, m, c, conn, own)
			checkCloseBack(t, m, c, conn, own)
		}
	}
}

// checkHeader: the frame's total and command sizes count its bytes.
func checkHeader(t *testing.T, whole []byte, cmdLen int) {
	t.Helper()
	if int(binary.BigEndian.Uint32(whole))+4 != len(whole) || int(binary.BigEndian.Uint32(whole[4:])) != cmdLen {
		t.Fatalf("header %x for %d bytes, a command of %d", whole[:8], len(whole), cmdLen)
	}
}

// checkReceiptBack: a SEND_RECEIPT for the connection's producer reaches the client with its
// own producer id, in a pooled frame.
func checkReceiptBack(t *testing.T, bp *bufPool, m *Mapper, c *Client, conn, own uint64) {
	t.Helper()
	rc, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{ProducerId: proto.Uint64(conn), SequenceId: proto.Uint64(own)}})
	fb := bp.newFrame(rc, nil)
	b, owner, err := m.AppendDown(fb.cmd(), rc)
	if err != nil || owner != c {
		t.Fatalf("receipt for %d: owner %p (want %p), %v", conn, owner, c, err)
	}
	f, err := fb.finish(b)
	if err != nil {
		t.Fatal(err)
	}
	checkHeader(t, f.Head, len(f.Command()))
	if got := mustDecode(f.Command()).GetSendReceipt().GetProducerId(); got != own {
		t.Fatalf("receipt for %d reached the client as producer %d, want %d", conn, got, own)
	}
	f.Release()
}

// checkCloseBack: a CLOSE_PRODUCER with a request id as wide as the client's producer id is
// mapped, and the broker's SUCCESS finds the client's request id.
func checkCloseBack(t *testing.T, m *Mapper, c *Client, conn, own uint64) {
	t.Helper()
	cl, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(own), RequestId: proto.Uint64(own)}})
	out, err := m.AppendUp(nil, c, cl)
	if err != nil {
		t.Fatal(err)
	}
	sent := mustDecode(out).GetCloseProducer()
	if sent.GetProducerId() != conn {
		t.Fatalf("close of %d sent as %v, want producer %d", own, sent, conn)
	}
	ok, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: sent.RequestId}})
	back, owner, err := m.AppendDown(nil, ok)
	if err != nil || owner != c || mustDecode(back).GetSuccess().GetRequestId() != own {
		t.Fatalf("close of %d: SUCCESS back to %p (want %p): %x, %v", own, owner, c, back, err)
	}
}
