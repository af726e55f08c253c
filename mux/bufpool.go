package mux

import (
	"encoding/binary"
	"math/bits"
	"sync"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
)

// bufPool recycles frame buffers, so that a frame on its way through the shared connection
// costs no allocation once the proxy runs warm: a frame's buffer goes back when the frame was
// written (towards the broker by the connection's writer, towards a client by its queue).
// Sizes come in classes a quarter of a power of two apart (a 1 MiB message's frame takes a
// buffer of 1.25 MiB, not 2), from 128 bytes to 16 MiB; larger frames are not pooled.
type bufPool struct {
	classes [numClasses]sync.Pool
}

const (
	minClassShift = 7  // 128 bytes: a small message's frame (a 100-byte SEND's takes 192)
	maxClassShift = 24 // 16 MiB
	numClasses    = 1 + (maxClassShift-minClassShift)*4
)

// pooledBuf is one buffer and the class it goes back to.
type pooledBuf struct {
	b    []byte
	home *sync.Pool
}

// classOf is the class of the smallest buffer that holds n bytes and its size; -1 when n
// is beyond the largest class.
func classOf(n int) (int, int) {
	if n <= 1<<minClassShift {
		return 0, 1 << minClassShift
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k
	if k > maxClassShift {
		return -1, n
	}
	quarter := 1 << (k - 3)
	q := (n - 1<<(k-1) + quarter - 1) / quarter // 1..4 quarters above 2^(k-1)
	return 1 + (k-minClassShift-1)*4 + q - 1, 1<<(k-1) + q*quarter
}

// get is a buffer of at least n bytes (its length n).
func (p *bufPool) get(n int) *pooledBuf {
	c, size := classOf(n)
	if c < 0 {
		return &pooledBuf{b: make([]byte, n)}
	}
	home := &p.classes[c]
	if pb, ok := home.Get().(*pooledBuf); ok {
		pb.b = pb.b[:n]
		return pb
	}
	return &pooledBuf{b: make([]byte, n, size), home: home}
}

// put gives a buffer back; nothing may use it afterwards.
func (pb *pooledBuf) put() {
	if pb != nil && pb.home != nil {
		pb.home.Put(pb)
	}
}

// cmdSlack is room for a mapped command beyond the client's bytes: each id may take more
// bytes, and the sub-message's length with them.
const cmdSlack = 10*maxIDs + 10

// frameBuf is a frame being built in a pooled buffer: the payload is copied first (outside
// the connection's lock), behind room for the header and the mapped command, which the
// mapping appends to cmd() under the lock.
type frameBuf struct {
	buf     *pooledBuf
	room    int // bytes before the payload
	payload int
}

func (p *bufPool) newFrame(command, payload []byte) frameBuf {
	room := frame.HeaderSize + len(command) + cmdSlack
	fb := frameBuf{buf: p.get(room + len(payload)), room: room, payload: len(payload)}
	copy(fb.buf.b[room:], payload)
	return fb
}

// cmd is where the mapped command is appended, after the header's 8 bytes; its capacity
// ends at the payload, so a command that outgrows the room (one re-encoded larger) moves to
// a buffer of its own rather than over the payload.
func (fb frameBuf) cmd() []byte { return fb.buf.b[:frame.HeaderSize:fb.room] }

// finish makes the frame of b (cmd() with the mapped command appended): the header and
// command are moved up against the payload, so that the frame is one piece of memory (one
// element of a vectored write).
func (fb frameBuf) finish(b []byte) (Frame, error) {
	cmdLen := len(b) - frame.HeaderSize
	total := uint64(4+cmdLen) + uint64(fb.payload)
	if total > 1<<32-1 {
		fb.buf.put()
		return Frame{}, frame.ErrFrameTooLarge
	}
	head := b
	if cap(b) == fb.room { // still in the buffer
		head = fb.buf.b[fb.room-len(b) : fb.room]
		copy(head, b)
	}
	binary.BigEndian.PutUint32(head, uint32(total))
	binary.BigEndian.PutUint32(head[4:], uint32(cmdLen))
	return Frame{Head: head, Payload: fb.buf.b[fb.room : fb.room+fb.payload], buf: fb.buf}, nil
}
