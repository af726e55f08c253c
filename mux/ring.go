package mux

// ring is a first-in first-out queue kept in a slice used as a ring: pushed at the back,
// popped from the front, its room doubled when full. A queue that is taken from while it
// fills (a busy client's frames, the writer's turns) reuses its room: a slice that slides
// along as its front is taken ends at its capacity again and again, and each append there
// allocated and copied the whole queue.
type ring[T any] struct {
	buf  []T // a power of two long, or empty
	head int // where the first item is
	n    int
}

// minRing is the room a ring starts with.
const minRing = 8

// Len is how many items the ring holds.
func (r *ring[T]) Len() int { return r.n }

// push adds v at the back.
func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

func (r *ring[T]) grow() {
	buf := make([]T, max(minRing, 2*len(r.buf)))
	k := copy(buf, r.buf[r.head:])
	copy(buf[k:], r.buf[:r.head])
	r.buf, r.head = buf, 0
}

// front is the first item; the ring must not be empty.
func (r *ring[T]) front() *T { return &r.buf[r.head] }

// pop removes the first item and returns it; its slot is cleared, so the ring keeps nothing
// it pointed at. The ring must not be empty.
func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		r.head = 0
	}
	return v
}

// removeFunc drops the items drop picks, keeping the others in order.
func (r *ring[T]) removeFunc(drop func(T) bool) {
	for range r.n {
		if v := r.pop(); !drop(v) {
			r.push(v)
		}
	}
}

// shrink lets go of the ring's room when it is empty and has more than keep items' room (a
// burst grew it), so a quiet queue holds little.
func (r *ring[T]) shrink(keep int) {
	if r.n == 0 && len(r.buf) > keep {
		*r = ring[T]{}
	}
}
