package mux

import (
	"encoding/binary"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
)

// bufPool holds the buffers of the frames a pool's connections carry: a frame's buffer goes
// back when the frame was written (towards the broker by the connection's writer, towards a
// client by its queue).
type bufPool struct{ frame.Buffers }

// cmdSlack is room for a mapped command beyond the client's bytes: each id may take more
// bytes, and the sub-message's length with them.
const cmdSlack = 10*maxIDs + 10

// frameBuf is a frame being built in a pooled buffer: the payload is copied first (outside
// the connection's lock), behind room for the header and the mapped command, which the
// mapping appends to cmd() under the lock.
type frameBuf struct {
	buf     *frame.Buffer
	room    int // bytes before the payload
	payload int
	owned   []byte        // the payload, when it stays where it is (in pay) rather than in buf
	pay     *frame.Buffer // owned's buffer
}

func (p *bufPool) newFrame(command, payload []byte) frameBuf {
	room := frame.HeaderSize + len(command) + cmdSlack
	fb := frameBuf{buf: p.Get(room + len(payload)), room: room, payload: len(payload)}
	copy(fb.buf.B[room:], payload)
	return fb
}

// ownFrame is newFrame for a payload handed over in the pooled buffer it was read into
// (frame.Reader.TakeLarge): it is not copied; the frame puts pay back once written. Only the
// header and the mapped command are built in a buffer of the pool's.
func (p *bufPool) ownFrame(command, payload []byte, pay *frame.Buffer) frameBuf {
	room := frame.HeaderSize + len(command) + cmdSlack
	return frameBuf{buf: p.Get(room), room: room, payload: len(payload), owned: payload, pay: pay}
}

// payloadBytes is where the frame's payload is.
func (fb frameBuf) payloadBytes() []byte {
	if fb.pay != nil {
		return fb.owned
	}
	return fb.buf.B[fb.room : fb.room+fb.payload]
}

// cmd is where the mapped command is appended, after the header's 8 bytes; its capacity
// ends at the payload, so a command that outgrows the room (one re-encoded larger) moves to
// a buffer of its own rather than over the payload.
func (fb frameBuf) cmd() []byte { return fb.buf.B[:frame.HeaderSize:fb.room] }

// finish makes the frame of b (cmd() with the mapped command appended): the header and
// command are moved up against the payload, so that the frame is one piece of memory (one
// element of a vectored write).
func (fb frameBuf) finish(b []byte) (Frame, error) {
	cmdLen := len(b) - frame.HeaderSize
	total := uint64(4+cmdLen) + uint64(fb.payload)
	if total > 1<<32-1 {
		fb.buf.Put() // pay, if any, is still its giver's
		return Frame{}, frame.ErrFrameTooLarge
	}
	head := b
	if cap(b) == fb.room { // still in the buffer
		head = fb.buf.B[fb.room-len(b) : fb.room]
		copy(head, b)
	}
	binary.BigEndian.PutUint32(head, uint32(total))
	binary.BigEndian.PutUint32(head[4:], uint32(cmdLen))
	return Frame{Head: head, Payload: fb.payloadBytes(), buf: fb.buf, pay: fb.pay}, nil
}
