package mux

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
)

// A chunk is a pooled buffer that one client's consecutive small frames one way are built
// in, one after another: they take no buffer each, and a run of them goes out as one piece
// of a vectored write (a 1 MiB batch of 136-byte frames was some 7,700 pieces). refs counts
// the frames in it not yet written, and the member's hold while it is the member's tail;
// the last to let go gives the buffer back. A frame's Head and Payload run on to the chunk's
// end: nothing may append to them.
type chunk struct {
	buf  *frame.Buffer
	used int // the bytes frames took, from the start (the tail's; under the conn's lock)
	refs atomic.Int32
}

// Chunk sizes: a member's first chunk is small, and each chunk it fills doubles the next up
// to maxChunk, so a quiet client holds little and a busy one sends long runs. A frame that
// needs more than maxChunkedFrame gets a buffer of its own.
const (
	minChunk        = 256
	maxChunk        = 64 << 10
	maxChunkedFrame = maxChunk / 8
)

var chunks = sync.Pool{New: func() any { return new(chunk) }}

// release lets go of one reference; nil is nothing.
func (ch *chunk) release() {
	if ch != nil && ch.refs.Add(-1) == 0 {
		ch.buf.Put()
		ch.buf = nil
		chunks.Put(ch)
	}
}

// chunkedSize is what a frame of command and payload needs in a chunk (room for the mapped
// command: cmdSlack), or 0 when it is to have a buffer of its own.
func chunkedSize(command, payload []byte) int {
	need := frame.HeaderSize + len(command) + cmdSlack + len(payload)
	if need > maxChunkedFrame {
		return 0
	}
	return need
}

// A chunkTail is the chunk a member's frames one way are being built in, and the size of the
// next one.
type chunkTail struct {
	ch   *chunk
	next int
}

// room is the tail chunk with need bytes free, a new one when the tail has not; left is the
// room the tail let go that way had unused.
func (t *chunkTail) room(need int, bufs *bufPool) (ch *chunk, left int) {
	if t.ch != nil && len(t.ch.buf.B)-t.ch.used >= need {
		return t.ch, 0
	}
	size := max(t.next, minChunk)
	if t.ch != nil { // filled: the client is busy
		left = t.roomLeft()
		t.drop()
		size = min(2*size, maxChunk)
	}
	t.next = size
	ch = chunks.Get().(*chunk)
	ch.buf, ch.used = bufs.Get(max(size, need)), 0
	ch.buf.B = ch.buf.B[:cap(ch.buf.B)] // its size class's slack is room too, and counted as such
	ch.refs.Store(1)
	t.ch = ch
	return ch, left
}

// roomLeft is what the tail chunk has not used (0 without one).
func (t *chunkTail) roomLeft() int {
	if t.ch == nil {
		return 0
	}
	return len(t.ch.buf.B) - t.ch.used
}

// drop lets go of the tail chunk: it is given back once its frames are written.
func (t *chunkTail) drop() {
	if t.ch != nil {
		t.ch.release()
		t.ch = nil
	}
}

// idle is drop for a member with no frames waiting that way: an idle client holds no chunk,
// and its next starts at half the size.
func (t *chunkTail) idle() {
	t.drop()
	t.next = max(t.next/2, minChunk)
}

// buildInTail maps command into the member's up tail chunk and copies the payload behind it,
// need bytes being reserved (chunkedSize). The frame is the chunk's once commit is called
// with end, where it ends in the chunk. Called with the conn's lock held.
func (mb *Member) buildInTail(need int, command, payload []byte) (f Frame, end int, err error) {
	c := mb.conn
	ch, _ := mb.upTail.room(need, &c.pool.bufs)
	start := ch.used
	room := ch.buf.B[start : start+frame.HeaderSize : start+need-len(payload)]
	b, err := c.m.AppendUp(room, mb.client, command)
	if err != nil {
		return Frame{}, 0, err
	}
	head := b
	cmdLen := len(head) - frame.HeaderSize
	binary.BigEndian.PutUint32(head, uint32(4+cmdLen+len(payload)))
	binary.BigEndian.PutUint32(head[4:], uint32(cmdLen))
	at := start + len(head)
	if cap(head) != cap(room) { // outgrew its room (so the mapping moved it): it stays there
		at = start
	}
	end = at + len(payload)
	copy(ch.buf.B[at:end], payload)
	if at != start {
		// Head's capacity runs on to the chunk's end, as a pooled frame's runs on to its
		// payload: batch.take joins pieces that follow one another in memory.
		head = ch.buf.B[start:at]
	}
	return Frame{Head: head, Payload: ch.buf.B[at:end], chunk: ch}, end, nil
}

// commit makes the frame built by buildInTail, ending at end, the chunk's.
func (f Frame) commit(end int) {
	f.chunk.used = end
	f.chunk.refs.Add(1)
}

// inChunk is a broker frame for mb whose command was mapped already, copied into the
// member's down tail chunk (a chunkedSize frame); left is the room a tail it let go had
// unused. The reader's alone: it lets go of a read's members' tails once it handed their
// frames over.
func (mb *Member) inChunk(head, payload []byte, bufs *bufPool) (f Frame, left int) {
	ch, left := mb.downTail.room(len(head)+len(payload), bufs)
	start := ch.used
	at := start + copy(ch.buf.B[start:], head)
	end := at + copy(ch.buf.B[at:], payload)
	f = Frame{Head: ch.buf.B[start:at], Payload: ch.buf.B[at:end], chunk: ch}
	f.commit(end)
	return f, left
}
