package frame

import (
	"math/bits"
	"sync"
)

// Buffers recycles byte buffers, so that frames on their way through the proxy cost no
// allocation once it runs warm (a multiplexed connection's frames, a Reader's buffer for a
// large frame). Sizes come in classes a quarter of a power of two apart (a 1 MiB message's
// frame takes a buffer of 1.25 MiB, not 2), from 128 bytes to 16 MiB; larger ones are not
// pooled.
type Buffers struct {
	classes [numClasses]sync.Pool
}

const (
	minClassShift = 7  // 128 bytes: a small message's frame (a 100-byte SEND's takes 192)
	maxClassShift = 24 // 16 MiB
	numClasses    = 1 + (maxClassShift-minClassShift)*4
)

// Buffer is one buffer and the class it goes back to.
type Buffer struct {
	B    []byte
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

// Get is a buffer of at least n bytes (its length n).
func (p *Buffers) Get(n int) *Buffer {
	c, size := classOf(n)
	if c < 0 {
		return &Buffer{B: make([]byte, n)}
	}
	home := &p.classes[c]
	if pb, ok := home.Get().(*Buffer); ok {
		pb.B = pb.B[:n]
		return pb
	}
	return &Buffer{B: make([]byte, n, size), home: home}
}

// Put gives a buffer back; nothing may use it afterwards. A nil Buffer is nothing.
func (pb *Buffer) Put() {
	if pb != nil && pb.home != nil {
		pb.home.Put(pb)
	}
}
