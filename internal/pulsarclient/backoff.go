package pulsarclient

import (
	"math/rand/v2"
	"time"
)

// backoff is the delay between attempts to bring a producer or consumer back: 100 ms,
// doubling to 30 s, with jitter so that the clients of one broker do not come back at once.
type backoff struct{ next time.Duration }

const (
	backoffInitial = 100 * time.Millisecond
	backoffMax     = 30 * time.Second
)

func (b *backoff) delay() time.Duration {
	if b.next == 0 {
		b.next = backoffInitial
	}
	d := b.next
	b.next = min(b.next*2, backoffMax)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

func (b *backoff) reset() { b.next = 0 }
