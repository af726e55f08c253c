package wait

import (
	"strings"
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
	if !strings.Contains(r.failed, "waited") {
		t.Fatal("a condition that never holds did not fail the test")
	}
}

// The polls thin out but the limit holds: a condition that never holds is not given up on
// before the limit, and is asked once more when the limit has passed.
func TestWithinKeepsTheLimit(t *testing.T) {
	const limit = time.Second
	began := time.Now()
	var last time.Time
	polls := 0
	held := Within(limit, func() bool { polls++; last = time.Now(); return false })
	if held {
		t.Fatal("Within reported a condition that never holds as held")
	}
	if took := time.Since(began); took < limit {
		t.Fatalf("gave up after %v, before the limit %v", took, limit)
	}
	if at := last.Sub(began); at < limit {
		t.Fatalf("last poll %v after the start, want one after the limit %v", at, limit)
	}
	if polls > 30 { // about 15; 100 at the first interval
		t.Fatalf("%d polls in %v: the interval did not grow", polls, limit)
	}
	if !Within(limit, func() bool { return true }) {
		t.Fatal("a condition that holds at once was not seen")
	}
}

// A slow condition is paused after for at least as long as it took: asked at most half the
// time.
func TestWithinPausesASlowCondition(t *testing.T) {
	const limit, takes = time.Second, 200 * time.Millisecond
	polls := 0
	Within(limit, func() bool { polls++; time.Sleep(takes); return false })
	if polls > 4 { // at 0, 400 and 800 ms, and once past the limit at most
		t.Fatalf("a condition taking %v asked %d times in %v, want at most 4", takes, polls, limit)
	}
}
