package connlimit

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// take acquires one descriptor at a time from s until it is refused or n are held; it
// returns the releases.
func take(s *Share, n int) []func() {
	var held []func()
	for range n {
		release, ok := s.Acquire(1)
		if !ok {
			break
		}
		held = append(held, release)
	}
	return held
}

func TestBudgetDescriptors(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limit, reserve uint64
		want           int64
	}{
		{"limit less the reserve", 1100, 100, 1000},
		{"a reserve over half the limit is cut to half", 1000, 900, 500},
		{"no limit", 0, 1024, math.MaxInt64 / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewBudgetMetrics(prometheus.NewRegistry())
			b := NewBudget(tc.limit, tc.reserve, m)
			if b.Descriptors() != tc.want {
				t.Errorf("descriptors %d, want %d", b.Descriptors(), tc.want)
			}
			if tc.limit == 0 && !math.IsInf(testutil.ToFloat64(m.total), 1) {
				t.Errorf("budget gauge %v, want +Inf without a limit", testutil.ToFloat64(m.total))
			}
		})
	}
}

// A flood on one listener stops at its ceiling, or where the other listeners' floors begin:
// what they need stays theirs.
func TestBudgetSharesKeepEachListenersPart(t *testing.T) {
	m := NewBudgetMetrics(prometheus.NewRegistry())
	b := NewBudget(40+20, 20, m) // 40 descriptors
	pulsar := b.Share("pulsar", 0, 0)
	http := b.Share("http", 4, 10)

	floodHTTP := take(http, 100)
	if len(floodHTTP) != 10 {
		t.Fatalf("an HTTP flood took %d descriptors, want its ceiling of 10", len(floodHTTP))
	}
	if got := len(take(pulsar, 100)); got != 30 {
		t.Fatalf("Pulsar got %d descriptors beside the HTTP flood, want the other 30", got)
	}
	if got := testutil.ToFloat64(m.refused.WithLabelValues("http")); got != 1 {
		t.Errorf("refused{http} = %v, want 1", got)
	}

	b2 := NewBudget(40+20, 20, nil)
	pulsar2, http2 := b2.Share("pulsar", 0, 0), b2.Share("http", 4, 10)
	floodPulsar := take(pulsar2, 100)
	if len(floodPulsar) != 36 {
		t.Fatalf("a Pulsar flood took %d descriptors, want all but HTTP's floor of 4", len(floodPulsar))
	}
	heldHTTP := take(http2, 100)
	if len(heldHTTP) != 4 {
		t.Fatalf("HTTP got %d descriptors beside the Pulsar flood, want its floor of 4", len(heldHTTP))
	}
	// What is given back can be taken again, by either.
	floodPulsar[0]()
	floodPulsar[1]()
	if got := len(take(http2, 100)); got != 2 {
		t.Fatalf("HTTP took %d of the 2 descriptors given back", got)
	}
	if got := testutil.ToFloat64(b2.metrics.used.WithLabelValues("http")); got != 6 {
		t.Errorf("used{http} = %v, want 6", got)
	}
}

// Several descriptors at once are taken whole or not at all.
func TestBudgetAcquiresSeveral(t *testing.T) {
	b := NewBudget(10, 5, nil) // 5 descriptors
	s := b.Share("http", 0, 0)
	r1, ok1 := s.Acquire(2)
	r2, ok2 := s.Acquire(2)
	_, ok3 := s.Acquire(2)
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("two, two, then two more of five: %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if _, ok := s.Acquire(1); !ok {
		t.Fatal("the fifth descriptor was not given")
	}
	r1()
	r2()
	if _, ok := s.Acquire(4); !ok {
		t.Fatal("four descriptors given back could not be taken again")
	}
}
