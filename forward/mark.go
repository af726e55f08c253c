package forward

import (
	"sync/atomic"
	"time"
)

// Mark is when something that should finish started (unix nanoseconds), 0 when idle: a frame
// whose rest has not come, a write that has not returned. A watchdog outside the pipe reads
// it (StuckFor) to close what has been stuck too long; setting it costs an atomic store.
type Mark struct{ since atomic.Int64 }

// Begin marks now, unless the mark is already set.
func (m *Mark) Begin() {
	if m.since.Load() == 0 {
		m.since.Store(time.Now().UnixNano())
	}
}

// End clears the mark.
func (m *Mark) End() { m.since.Store(0) }

// Progress marks now: the last time bytes arrived while a frame is still incomplete.
func (m *Mark) Progress() { m.since.Store(time.Now().UnixNano()) }

// StuckFor is how long the mark has been set at now; 0 when it is not.
func (m *Mark) StuckFor(now time.Time) time.Duration {
	s := m.since.Load()
	if s == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, s))
}
