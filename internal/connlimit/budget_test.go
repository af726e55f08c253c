package connlimit

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// take acquires from s until it is refused or n are held; it returns the releases.
func take(s *Share, n int) []func() {
	var held []func()
	for range n {
		release, ok := s.Acquire()
		if !ok {
			break
		}
		held = append(held, release)
	}
	return held
}

func TestBudgetConnections(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limit, reserve uint64
		want           int64
	}{
		{"limit less the reserve, two descriptors a connection", 1100, 100, 500},
		{"a reserve over half the limit is cut to half", 1000, 900, 250},
		{"no limit", 0, 1024, math.MaxInt64 / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewBudgetMetrics(prometheus.NewRegistry())
			b := NewBudget(tc.limit, tc.reserve, m, zerolog.Nop())
			if b.Connections() != tc.want {
				t.Errorf("connections %d, want %d", b.Connections(), tc.want)
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
	b := NewBudget(2*40+20, 20, m, zerolog.Nop()) // 40 connections
	pulsar := b.Share("pulsar", 0, 0)
	http := b.Share("http", 4, 10)

	floodHTTP := take(http, 100)
	if len(floodHTTP) != 10 {
		t.Fatalf("an HTTP flood took %d connections, want its ceiling of 10", len(floodHTTP))
	}
	if got := len(take(pulsar, 100)); got != 30 {
		t.Fatalf("Pulsar got %d connections beside the HTTP flood, want the other 30", got)
	}
	if got := testutil.ToFloat64(m.refused.WithLabelValues("http")); got != 1 {
		t.Errorf("refused{http} = %v, want 1", got)
	}

	b2 := NewBudget(2*40+20, 20, nil, zerolog.Nop())
	pulsar2, http2 := b2.Share("pulsar", 0, 0), b2.Share("http", 4, 10)
	floodPulsar := take(pulsar2, 100)
	if len(floodPulsar) != 36 {
		t.Fatalf("a Pulsar flood took %d connections, want all but HTTP's floor of 4", len(floodPulsar))
	}
	heldHTTP := take(http2, 100)
	if len(heldHTTP) != 4 {
		t.Fatalf("HTTP got %d connections beside the Pulsar flood, want its floor of 4", len(heldHTTP))
	}
	// What is given back can be taken again, by either.
	floodPulsar[0]()
	floodPulsar[1]()
	if got := len(take(http2, 100)); got != 2 {
		t.Fatalf("HTTP took %d of the 2 connections given back", got)
	}
	if got := testutil.ToFloat64(b2.metrics.used.WithLabelValues("http")); got != 6 {
		t.Errorf("used{http} = %v, want 6", got)
	}
}
