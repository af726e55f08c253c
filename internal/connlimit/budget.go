package connlimit

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Budget is the file descriptors the process lets its clients hold, counted as they are
// taken: a client connection's own, and the one it makes the proxy open for it (a direct
// session's broker connection, taken as it dials; an admin request's connection to a broker's
// web service or its spooled body, counted with the HTTP connection). It is the open-files
// limit less a reserve kept for what belongs to no client (the listeners, the control,
// discovery's and multiplexed broker connections, configuration, certificate and policy
// reloads, the log).
// A process that runs out of descriptors stops accepting on every listener at once and fails
// its reloads; with the budget a client over it is refused as it is accepted instead, and the
// rest keeps working. Each listener takes its part through a Share, so that a flood on one
// cannot take what another needs.
type Budget struct {
	fds     int64 // the descriptors the budget holds, all listeners together
	metrics *BudgetMetrics

	mu     sync.Mutex
	used   int64
	shares []*Share
}

// NewBudget makes the budget of an open-files limit (0: none, the budget is then unbounded)
// less reserve descriptors, the reserve cut to half the limit where it is more (ReserveKept),
// so that a small limit still admits clients. m may be nil (counted, not registered).
func NewBudget(limit, reserve uint64, m *BudgetMetrics) *Budget {
	if m == nil {
		m = NewBudgetMetrics(nil)
	}
	b := &Budget{fds: math.MaxInt64 / 2, metrics: m}
	if limit == 0 {
		m.total.Set(math.Inf(1))
		return b
	}
	kept, _ := ReserveKept(limit, reserve)
	b.fds = int64(limit - kept)
	m.total.Set(float64(b.fds))
	return b
}

// ReserveKept is the reserve a budget of limit keeps back: reserve, or half the limit when
// reserve is more (cut is then true, which the proxy warns of at start).
func ReserveKept(limit, reserve uint64) (kept uint64, cut bool) {
	if limit > 0 && reserve > limit/2 {
		return limit / 2, true
	}
	return reserve, false
}

// Descriptors is how many descriptors the budget holds, all listeners together.
func (b *Budget) Descriptors() int64 { return b.fds }

// Share is one listener's part of a Budget: at most ceiling descriptors, and floor of them kept
// for it (the other listeners cannot take those, even when it holds fewer).
type Share struct {
	b              *Budget
	floor, ceiling int64
	used           int64 // guarded by b.mu
	usedGauge      prometheus.Gauge
	refused        prometheus.Counter
}

// Share gives the listener name (a metric label) its part: at most ceiling descriptors (0: the
// whole budget), floor of them kept for it (at most ceiling).
func (b *Budget) Share(name string, floor, ceiling int64) *Share {
	if ceiling <= 0 || ceiling > b.fds {
		ceiling = b.fds
	}
	s := &Share{b: b, floor: min(floor, ceiling), ceiling: ceiling,
		usedGauge: b.metrics.used.WithLabelValues(name), refused: b.metrics.refused.WithLabelValues(name)}
	b.mu.Lock()
	b.shares = append(b.shares, s)
	b.mu.Unlock()
	return s
}

// Acquire counts n descriptors a client of the share's listener takes. It reports false,
// holding nothing, when the listener is at its ceiling or the budget is spent, the other
// listeners' floors included; otherwise release must be called once, when they are closed.
func (s *Share) Acquire(n int64) (release func(), ok bool) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.used+n > s.ceiling || b.used+n+b.keptFor(s) > b.fds {
		s.refused.Inc()
		return nil, false
	}
	s.used += n
	b.used += n
	s.usedGauge.Add(float64(n))
	return func() { s.release(n) }, true
}

// keptFor is what the other listeners' floors keep from s: the part of each floor not in use.
func (b *Budget) keptFor(s *Share) int64 {
	var kept int64
	for _, o := range b.shares {
		if o != s && o.used < o.floor {
			kept += o.floor - o.used
		}
	}
	return kept
}

func (s *Share) release(n int64) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.used -= n
	s.b.used -= n
	s.usedGauge.Sub(float64(n))
}

// BudgetMetrics are the descriptor budget's series; label values are listener names.
type BudgetMetrics struct {
	total   prometheus.Gauge
	used    *prometheus.GaugeVec
	refused *prometheus.CounterVec
}

// NewBudgetMetrics registers the budget's series with reg (nil: not registered).
func NewBudgetMetrics(reg prometheus.Registerer) *BudgetMetrics {
	m := &BudgetMetrics{
		total: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_descriptor_budget",
			Help: "File descriptors the process lets its clients hold, all listeners together: the open-files limit less session.descriptorReserve; +Inf without a limit.",
		}),
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_descriptor_budget_used",
			Help: "Descriptors counted against the budget now, by listener (pulsar: both Pulsar listeners' connections and direct sessions' broker connections; http, https: two a connection).",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_descriptor_budget_refused_total",
			Help: "Client connections closed as they were accepted, or direct sessions refused before they dialled their broker, because the descriptor budget (or the listener's part of it) was spent, by listener.",
		}, []string{"listener"}),
	}
	if reg != nil {
		reg.MustRegister(m.total, m.used, m.refused)
	}
	return m
}
