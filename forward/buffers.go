package forward

import (
	"sync"
	"sync/atomic"
)

// Read buffers of direct-mode pipes come in two size classes. A pipe starts small, moves to
// the large class when a read fills its buffer or a frame needs more room, and hands its
// buffer back whenever it would block on an empty buffer, so an idle session holds none.
const (
	smallBufferSize = 4 << 10
	largeBufferSize = 64 << 10
)

// Buffers are what pipes borrow and give back: read buffers, and (on Linux) the kernel pipes
// that splice bytes socket to socket. A server owns one set for all its sessions.
type Buffers struct {
	reads bufferPools
	pipes splicePipes
}

// NewBuffers makes an empty set; buffers and pipes are made as pipes first ask for them.
func NewBuffers() *Buffers {
	b := &Buffers{}
	b.reads.small.New = func() any { return new([smallBufferSize]byte) }
	b.reads.large.New = func() any { return new([largeBufferSize]byte) }
	return b
}

// BufferBytes is how many bytes of read buffers pipes hold now.
func (b *Buffers) BufferBytes() int64 { return b.reads.held.Load() }

// bufferPools recycles read buffers between pipes; pointers to arrays keep Put from
// allocating.
type bufferPools struct {
	small sync.Pool    // *[smallBufferSize]byte
	large sync.Pool    // *[largeBufferSize]byte
	held  atomic.Int64 // bytes of buffers taken and not yet given back
}

// buffer is one pooled read buffer; its zero value holds nothing.
type buffer struct {
	small *[smallBufferSize]byte
	large *[largeBufferSize]byte
}

func (b *buffer) bytes() []byte {
	switch {
	case b.large != nil:
		return b.large[:]
	case b.small != nil:
		return b.small[:]
	}
	return nil
}

// get fills b with a buffer of the given class; b must be empty.
func (p *bufferPools) get(b *buffer, large bool) {
	if large {
		b.large = p.large.Get().(*[largeBufferSize]byte)
		p.held.Add(largeBufferSize)
	} else {
		b.small = p.small.Get().(*[smallBufferSize]byte)
		p.held.Add(smallBufferSize)
	}
}

// put returns b's buffer to its pool and empties b.
func (p *bufferPools) put(b *buffer) {
	if b.large != nil {
		p.large.Put(b.large)
		p.held.Add(-largeBufferSize)
	}
	if b.small != nil {
		p.small.Put(b.small)
		p.held.Add(-smallBufferSize)
	}
	*b = buffer{}
}
