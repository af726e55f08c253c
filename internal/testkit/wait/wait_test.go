package wait

import (
	"testing"
	"time"
)

type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func TestUntil(t *testing.T) {
	n := 0
	Until(t, time.Second, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
	r := &recorder{TB: t}
	func() {
		defer func() { recover() }()
		Until(r, 10*time.Millisecond, "nothing", func() bool { return false })
	}()
	if r.failed == "" {
		t.Fatal("a condition that never holds did not fail the test")
	}
}
