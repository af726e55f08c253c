package mux

import (
	"slices"
	"testing"
)

// items is a copy of what the ring holds, front first.
func (r *ring[T]) items() []T {
	out := make([]T, 0, r.n)
	for i := range r.n {
		out = append(out, r.buf[(r.head+i)&(len(r.buf)-1)])
	}
	return out
}

// TestRingOrder: a ring pushed and popped in every interleaving a busy queue sees (popped
// while it fills, grown while it wraps) gives its items back in the order they came, and
// removeFunc keeps the rest in order.
func TestRingOrder(t *testing.T) {
	var r ring[int]
	var want []int
	next := 0
	for round := range 200 {
		for range round%13 + 1 {
			r.push(next)
			want = append(want, next)
			next++
		}
		for range round % 11 {
			if r.Len() == 0 {
				break
			}
			if got := r.pop(); got != want[0] {
				t.Fatalf("round %d: popped %d, want %d", round, got, want[0])
			}
			want = want[1:]
		}
		if !slices.Equal(r.items(), want) {
			t.Fatalf("round %d: ring holds %v, want %v", round, r.items(), want)
		}
	}
	odd := func(v int) bool { return v%2 == 1 }
	r.removeFunc(odd)
	want = slices.DeleteFunc(want, odd)
	if !slices.Equal(r.items(), want) {
		t.Fatalf("after removeFunc: %v, want %v", r.items(), want)
	}
}

// TestRingClearsPopped: a popped slot keeps nothing (a frame's buffer, a member) alive.
func TestRingClearsPopped(t *testing.T) {
	var r ring[*int]
	for i := range 5 {
		r.push(&i)
	}
	for range 5 {
		r.pop()
	}
	for i, p := range r.buf {
		if p != nil {
			t.Fatalf("slot %d still points at %d", i, *p)
		}
	}
}

// TestRingSteadyStateAllocs: a queue taken from while it fills (the front popped, the back
// pushed, never empty) allocates nothing once it has grown to its depth.
func TestRingSteadyStateAllocs(t *testing.T) {
	var r ring[Frame]
	for range 1000 {
		r.push(Frame{})
	}
	allocs := testing.AllocsPerRun(100, func() {
		for range 100 {
			r.pop()
		}
		for range 100 {
			r.push(Frame{})
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per 100 frames through a queue 1000 deep", allocs)
	}
}
