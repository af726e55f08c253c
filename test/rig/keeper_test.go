package rig

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeBrokers stands in for the rig's processes: which run, which the test stopped on
// purpose, and the starts the keeper asked for.
type fakeBrokers struct {
	mu      sync.Mutex
	running map[int]bool
	down    map[int]bool
	starts  []int
	failing int // starts that fail before one succeeds
	logs    []string
}

func (f *fakeBrokers) keeper(ops *sync.Mutex) *keeper {
	return &keeper{
		brokers: 2,
		alive:   func(n int) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.running[n] },
		wanted:  func(n int) bool { f.mu.Lock(); defer f.mu.Unlock(); return !f.down[n] },
		start: func(_ context.Context, n int) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.starts = append(f.starts, n)
			if f.failing > 0 {
				f.failing--
				return errors.New("did not become ready")
			}
			f.running[n] = true
			return nil
		},
		lastLog: func(n int) string { return "its last error: Encountered fatal error. Shutting down." },
		ops:     ops,
		logf: func(format string, args ...any) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.logs = append(f.logs, fmt.Sprintf(format, args...))
		},
		retry: 20 * time.Millisecond,
	}
}

func (f *fakeBrokers) startsSoFar() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.starts...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestKeeperStartsABrokerThatDiedUnbidden(t *testing.T) {
	f := &fakeBrokers{running: map[int]bool{1: false, 2: false}, down: map[int]bool{2: true}}
	var ops sync.Mutex
	stop := f.keeper(&ops).run(time.Millisecond)
	waitFor(t, "broker 1 to be started again", func() bool { return len(f.startsSoFar()) > 0 })
	time.Sleep(50 * time.Millisecond) // many more rounds: neither broker is started again
	stop()
	if got := f.startsSoFar(); len(got) != 1 || got[0] != 1 {
		t.Errorf("starts %v, want broker 1 once (broker 2 was stopped on purpose)", got)
	}
	if len(f.logs) != 2 {
		t.Errorf("logs %q, want the exit with its reason and the restart", f.logs)
	}
}

func TestKeeperTriesAgainAfterAFailedStart(t *testing.T) {
	f := &fakeBrokers{running: map[int]bool{1: true, 2: false}, failing: 2}
	var ops sync.Mutex
	stop := f.keeper(&ops).run(time.Millisecond)
	defer stop()
	waitFor(t, "broker 2 to run", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.running[2] })
	if got := f.startsSoFar(); len(got) != 3 {
		t.Errorf("starts %v, want two failures and a success", got)
	}
}

// A broker a test is stopping has exited before the stop returns; the keeper must not take
// it for one that died, so it waits for the stop to finish (it holds ops) and then sees it
// wanted down.
func TestKeeperLeavesABrokerBeingStopped(t *testing.T) {
	f := &fakeBrokers{running: map[int]bool{1: true, 2: true}, down: map[int]bool{}}
	var ops sync.Mutex
	ops.Lock() // the stop: mark wanted down, then the process exits
	f.mu.Lock()
	f.down[1] = true
	f.running[1] = false
	f.mu.Unlock()
	stop := f.keeper(&ops).run(time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	ops.Unlock()
	time.Sleep(20 * time.Millisecond)
	stop()
	if got := f.startsSoFar(); len(got) != 0 {
		t.Errorf("starts %v, want none: broker 1 was stopped on purpose", got)
	}
}
