package frame

import "testing"

// TestClassOf: every size gets a class whose buffers hold it, classes grow with the size, and
// a class's buffers are at most a quarter of a power of two larger than what they hold.
func TestClassOf(t *testing.T) {
	last, lastSize := 0, 1<<minClassShift
	for n := 1; n <= 1<<maxClassShift; n += 1 + n/97 {
		c, size := classOf(n)
		if c < 0 || c >= numClasses || size < n || c < last || (c == last && size != lastSize) {
			t.Fatalf("classOf(%d) = %d, %d after %d, %d", n, c, size, last, lastSize)
		}
		if n > 1<<minClassShift && float64(size) > 1.26*float64(n) {
			t.Fatalf("classOf(%d): %d bytes", n, size)
		}
		last, lastSize = c, size
	}
	if c, _ := classOf(1<<maxClassShift + 1); c != -1 {
		t.Fatalf("beyond the largest class: %d", c)
	}
	var p Buffers
	b := p.Get(1<<20 + 100) // a 1 MiB message's frame
	if len(b.B) != 1<<20+100 || cap(b.B) != 5<<18 {
		t.Fatalf("1 MiB: len %d cap %d", len(b.B), cap(b.B))
	}
}
