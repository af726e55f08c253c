package mux

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// payloadOf is client i's payload for sequence seq: its length crosses maxChunkedFrame, so
// that frames built in chunks and frames in buffers of their own alternate.
func payloadOf(i int, seq uint64) []byte {
	n := int(seq*7919+uint64(i)*104729) % (maxChunkedFrame + 2000)
	return bytes.Repeat([]byte{byte(i), byte(seq)}, n/2)
}

// TestChunkedFramesArriveWhole: clients sending at once, small frames built one after
// another in each client's chunks and larger ones in buffers of their own, reach the broker
// each whole and in its client's order; a chunk given back while frames in it still waited
// would be reused by another client and its bytes written over.
func TestChunkedFramesArriveWhole(t *testing.T) {
	c, broker := sharedConn(t)
	const clients, frames = 6, 1500
	members := make([]*Member, clients)
	byID := map[uint64]int{} // the producer id the broker sees, to the client
	c.mu.Lock()
	for i := range members {
		members[i] = c.attach(nopHandler{})
	}
	c.mu.Unlock()
	for i, mb := range members {
		byID[readyProducer(t, c, broker, mb, 1)] = i
	}
	sent := make(chan error, clients)
	for i, mb := range members {
		go func() {
			for seq := range uint64(frames) {
				if err := mb.Send(sendCmd(1, seq), payloadOf(i, seq)); err != nil {
					sent <- fmt.Errorf("client %d, sequence %d: %w", i, seq, err)
					return
				}
			}
			sent <- nil
		}()
	}
	if err := broker.conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	next := make([]uint64, clients)
	for got := 0; got < clients*frames; got++ {
		f, err := broker.ReadFrame()
		if err != nil {
			select {
			case serr := <-sent:
				t.Fatalf("after %d frames: %v (a send: %v)", got, err, serr)
			default:
			}
			t.Fatalf("after %d frames: %v", got, err)
		}
		send := mustDecode(f.Command).GetSend()
		i, ok := byID[send.GetProducerId()]
		if !ok {
			t.Fatalf("a SEND of producer %d, which no client has", send.GetProducerId())
		}
		if seq := send.GetSequenceId(); seq != next[i] {
			t.Fatalf("client %d: sequence %d came where %d was due", i, seq, next[i])
		}
		if want := payloadOf(i, next[i]); !bytes.Equal(f.Payload, want) {
			t.Fatalf("client %d, sequence %d: payload of %d bytes changed on the way", i, next[i], len(want))
		}
		next[i]++
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, mb := range members {
		if mb.upTail.ch != nil && mb.up.Len() == 0 {
			t.Errorf("client %d holds a chunk with nothing queued", i)
		}
	}
}

// TestChunkRunsAreOnePiece: a client's consecutive small frames go out as one piece of the
// vectored write.
func TestChunkRunsAreOnePiece(t *testing.T) {
	c, broker := sharedConn(t)
	mb := producingMember(t, c, broker)
	c.mu.Lock()
	const n = 5
	for seq := range uint64(n) {
		f, end, err := mb.buildInTail(chunkedSize(sendCmd(1, seq), []byte("hello")), sendCmd(1, seq), []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		f.commit(end)
		mb.up.push(f)
	}
	var w batch
	w.take(&mb.up, maxBatch)
	c.mu.Unlock()
	if len(w.vec) != 1 || len(w.frames) != n {
		t.Fatalf("%d frames in %d pieces, want %d in one", len(w.frames), len(w.vec), n)
	}
	var want []byte
	for _, f := range w.frames {
		want = append(append(want, f.Head...), f.Payload...)
	}
	if !bytes.Equal(w.vec[0], want) {
		t.Fatal("the piece is not the frames' bytes in order")
	}
	for _, f := range w.frames {
		f.Release()
	}
}

// keeping is a client whose queue has not written its frames yet: it keeps them.
type keeping struct{ frames *[]Frame }

func (h keeping) Deliver(fs []Frame) error { *h.frames = append(*h.frames, fs...); return nil }
func (keeping) Lost(Held)                  {}

// TestDownChunksOutliveTheRead: a client's frames built in its down chunks stay as they were
// until the client is done with them, through many reads of the connection after theirs and
// while a neighbour's chunks come and go; a chunk given back with frames still in it would be
// reused and written over.
func TestDownChunksOutliveTheRead(t *testing.T) {
	c, _ := sharedConn(t)
	var kept []Frame
	var released int
	rcs := receiptsFor(t, c, keeping{&kept}, releasing{&released})
	receipt := func(client int, seq uint64) []byte {
		id := mustDecode(rcs[client]).GetSendReceipt().GetProducerId()
		b, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
			ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(seq)}})
		return b
	}
	var dl downLoad
	const reads, perRead = 50, 300
	for r := range reads {
		for i := range perRead {
			seq := uint64(r*perRead + i)
			dl.add(c, pb.BaseCommand_SEND_RECEIPT, receipt(i%2, seq), nil)
		}
		dl.flush(c)
	}
	if len(kept) != reads*perRead/2 || released != reads*perRead/2 {
		t.Fatalf("the clients got %d and %d receipts, want %d each", len(kept), released, reads*perRead/2)
	}
	for i, f := range kept {
		rc := mustDecode(f.Command()).GetSendReceipt()
		if want := uint64(2 * i); rc.GetSequenceId() != want || rc.GetProducerId() != 1 {
			t.Fatalf("kept receipt %d: producer %d, sequence %d, want producer 1, sequence %d", i, rc.GetProducerId(), rc.GetSequenceId(), want)
		}
		f.Release()
	}
}

// queueing is a client whose queue is not being written (it does not read its socket).
type queueing struct{ q *OutQueue }

func (h queueing) Deliver(fs []Frame) error { return h.q.PushAll(fs) }
func (queueing) Lost(Held)                  {}

// TestClientQueueBoundCountsDownChunks: a client that does not read, and gets one small frame
// a read of the shared connection (it paces its sends), fills its queue up to the bound in
// memory: each of its frames starts a chunk, whose room it is charged with. Counted by the
// frames' bytes alone, a queue bounded at 1 MiB kept 6 MB of chunks.
func TestClientQueueBoundCountsDownChunks(t *testing.T) {
	c, _ := sharedConn(t)
	const limit = 1 << 20
	q := NewOutQueue(limit)
	rcs := receiptsFor(t, c, queueing{q})
	var dl downLoad
	worst := 0
	for reads := 0; ; reads++ {
		dl.add(c, pb.BaseCommand_SEND_RECEIPT, rcs[0], nil)
		dl.flush(c)
		q.mu.Lock()
		held, closed := memoryOf(&q.frames), q.closed
		q.mu.Unlock()
		worst = max(worst, held)
		if closed {
			t.Logf("the queue went over its bound after %d reads, holding at most %d bytes", reads, worst)
			break
		}
	}
	if worst > limit {
		t.Fatalf("a queue bounded at %d bytes kept %d bytes of chunks", limit, worst)
	}
}

// TestRefusedSendKeepsNoChunk: a command the mapping refuses leaves a client with nothing
// queued holding no chunk (the writer, which lets go of a client's chunk, has nothing of it).
func TestRefusedSendKeepsNoChunk(t *testing.T) {
	c, broker := sharedConn(t)
	mb := producingMember(t, c, broker)
	if err := mb.Send(sendCmd(99, 1), []byte("x")); err == nil {
		t.Fatal("a SEND of a producer the client does not have was sent")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if mb.upTail.ch != nil && !mb.queued {
		t.Fatalf("a client with nothing queued holds a chunk of %d bytes", cap(mb.upTail.ch.buf.B))
	}
}

// TestOnlyDataFramesShareChunks: a broker frame a client's handler may release before it is
// written (a close it rewrites, a topic list it filters) has a buffer of its own; a chunk
// kept by the frames before it would otherwise be counted by none of them.
func TestOnlyDataFramesShareChunks(t *testing.T) {
	c, _ := sharedConn(t)
	var kept []Frame
	rcs := receiptsFor(t, c, keeping{&kept})
	id := mustDecode(rcs[0]).GetSendReceipt().GetProducerId()
	closing, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
		ProducerId: proto.Uint64(id), RequestId: proto.Uint64(1)}})
	var dl downLoad
	dl.add(c, pb.BaseCommand_SEND_RECEIPT, rcs[0], nil)
	dl.add(c, pb.BaseCommand_CLOSE_PRODUCER, closing, nil)
	dl.flush(c)
	if len(kept) != 2 {
		t.Fatalf("the client got %d frames, want 2", len(kept))
	}
	if kept[0].chunk == nil || kept[1].chunk != nil {
		t.Fatalf("the receipt in a chunk: %v, the close: %v; want the receipt alone", kept[0].chunk != nil, kept[1].chunk != nil)
	}
	for _, f := range kept {
		f.Release()
	}
}
