package mux

import (
	"bytes"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// memoryOf is what queued frames keep from the heap, counted from the buffers themselves:
// each pooled buffer's capacity and its frame.Buffer, each chunk's once, and the queue's
// room for Frames.
func memoryOf(q *ring[Frame]) int {
	n := len(q.buf) * int(unsafe.Sizeof(Frame{}))
	chunks := map[*chunk]bool{}
	for _, f := range q.items() {
		switch {
		case f.chunk != nil && !chunks[f.chunk]:
			chunks[f.chunk] = true
			n += cap(f.chunk.buf.B) + int(unsafe.Sizeof(frame.Buffer{})+unsafe.Sizeof(chunk{}))
		case f.buf != nil:
			n += cap(f.buf.B) + int(unsafe.Sizeof(frame.Buffer{}))
		}
	}
	return n
}

// TestClientQueueBoundIsMemory: a client that does not read its SEND_RECEIPTs (27-byte
// frames, each in a pooled buffer of 128 bytes) fills its queue up to the bound in memory,
// not in frame bytes. Counted by the frames' sizes, a queue bounded at 32 MiB held 264 MiB
// of heap: the bound is what keeps one client from taking the proxy's memory.
func TestClientQueueBoundIsMemory(t *testing.T) {
	m, c := NewMapper(), NewClient()
	conn := acceptedProducer(t, m, c, 1)
	rc, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: proto.Uint64(conn), SequenceId: proto.Uint64(123456), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1234), EntryId: proto.Uint64(56789)}}})
	const limit = 1 << 20
	var bp bufPool
	q := NewOutQueue(limit)
	for pushed := 0; ; pushed++ {
		fb := bp.newFrame(rc, nil) // as Conn.deliver builds it
		b, _, err := m.AppendDown(fb.cmd(), rc)
		if err != nil {
			t.Fatal(err)
		}
		f, err := fb.finish(b)
		if err != nil {
			t.Fatal(err)
		}
		if q.Push(f) != nil {
			t.Logf("%d frames of %d bytes queued", pushed, f.Size())
			break
		}
		q.mu.Lock()
		held, counted := memoryOf(&q.frames), q.bytes
		q.mu.Unlock()
		if held > limit {
			t.Fatalf("a queue bounded at %d bytes holds %d bytes of buffers (it counted %d)", limit, held, counted)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.frames.Len() != 0 || len(q.frames.buf) != 0 {
		t.Fatalf("a queue closed as full still holds %d frames in %d slots", q.frames.Len(), len(q.frames.buf))
	}
}

// TestBrokerQueueBoundIsMemory: a client's frames waiting for the shared connection (100-byte
// SENDs, built one after another in chunks) hold at most the per-client bound (and the
// frame that went over it) in memory before the client's Send waits; counted by the frames'
// sizes they held three times the bound.
func TestBrokerQueueBoundIsMemory(t *testing.T) {
	c, broker := sharedConn(t)
	mb := producingMember(t, c, broker)
	// The broker reads nothing more: the writer stops in its first write (a net.Pipe), and
	// the client's frames stay in its queue until its Send waits.
	payload := bytes.Repeat([]byte{'p'}, 100)
	done := make(chan error, 1)
	go func() {
		for seq := uint64(0); ; seq++ {
			if err := mb.Send(sendCmd(1, seq), payload); err != nil {
				done <- err
				return
			}
		}
	}()
	full := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return mb.upBytes > upQueueBytes
	}
	wait.Until(t, 10*time.Second, "the client's queue to reach its bound", full)
	c.mu.Lock()
	up := mb.up.items()
	held, frames, last := memoryOf(&mb.up), len(up), up[len(up)-1].held()
	c.mu.Unlock()
	t.Logf("%d frames queued", frames)
	if held > upQueueBytes+last {
		t.Fatalf("a client's queue bounded at %d bytes holds %d bytes of buffers in %d frames", upQueueBytes, held, frames)
	}
	broker.conn.Close() // the connection fails; Send returns
	<-done
}
