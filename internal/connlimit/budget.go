package connlimit

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// PerConnection is how many file descriptors one client connection is counted as: its own,
// and the one it may make the proxy open for it (a direct session's broker connection; an
// admin request's connection to a broker's web service, or its spooled body). Counting both
// keeps the reserve whole whatever the clients do, at the price of leaving some descriptors
// unused when most clients only look topics up.
const PerConnection = 2

// Budget is the file descriptors the process lets its clients hold: the open-files limit less
// a reserve kept for what belongs to no client (the listeners, the lookup pool's, discovery's
// and multiplexed broker connections, configuration, certificate and policy reloads, the log).
// A process that runs out of descriptors stops accepting on every listener at once and fails
// its reloads; with the budget a client over it is refused as it is accepted instead, and the
// rest keeps working. Each listener takes its part through a Share, so that a flood on one
// cannot take what another needs.
type Budget struct {
	conns   int64 // client connections the budget holds, all listeners together
	metrics *BudgetMetrics

	mu     sync.Mutex
	used   int64
	shares []*Share
}

// NewBudget makes the budget of an open-files limit (0: none, the budget is then unbounded)
// less reserve descriptors. A reserve over half the limit is cut to half, with a warning, so
// that a small limit still admits clients. m may be nil (counted, not registered).
func NewBudget(limit, reserve uint64, m *BudgetMetrics, log zerolog.Logger) *Budget {
	if m == nil {
		m = NewBudgetMetrics(nil)
	}
	b := &Budget{conns: math.MaxInt64 / 2, metrics: m}
	if limit == 0 {
		m.total.Set(math.Inf(1))
		return b
	}
	if reserve > limit/2 {
		log.Warn().Uint64("open_files_limit", limit).Uint64("reserve", reserve).Uint64("reserve_used", limit/2).
			Msg("session.descriptorReserve is more than half the open-files limit; keeping half of it back instead (raise the limit: ulimit -n, or the container runtime's nofile)")
		reserve = limit / 2
	}
	b.conns = int64((limit - reserve) / PerConnection)
	m.total.Set(float64(b.conns))
	return b
}

// Connections is how many client connections the budget holds, all listeners together.
func (b *Budget) Connections() int64 { return b.conns }

// Share is one listener's part of a Budget: at most ceiling connections, and floor of them kept
// for it (the other listeners cannot take those, even when it holds fewer).
type Share struct {
	b              *Budget
	floor, ceiling int64
	used           int64 // guarded by b.mu
	usedGauge      prometheus.Gauge
	refused        prometheus.Counter
}

// Share gives the listener name (a metric label) its part: at most ceiling connections (0: the
// whole budget), floor of them kept for it (at most ceiling).
func (b *Budget) Share(name string, floor, ceiling int64) *Share {
	if ceiling <= 0 || ceiling > b.conns {
		ceiling = b.conns
	}
	s := &Share{b: b, floor: min(floor, ceiling), ceiling: ceiling,
		usedGauge: b.metrics.used.WithLabelValues(name), refused: b.metrics.refused.WithLabelValues(name)}
	b.mu.Lock()
	b.shares = append(b.shares, s)
	b.mu.Unlock()
	return s
}

// Acquire counts a new client connection of the share's listener. It reports false, holding
// nothing, when the listener is at its ceiling or the budget is spent, the other listeners'
// floors included; otherwise release must be called once, when the connection is closed.
func (s *Share) Acquire() (release func(), ok bool) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.used >= s.ceiling || b.used+1+b.keptFor(s) > b.conns {
		s.refused.Inc()
		return nil, false
	}
	s.used++
	b.used++
	s.usedGauge.Inc()
	return s.release, true
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

func (s *Share) release() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.used--
	s.b.used--
	s.usedGauge.Dec()
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
			Name: "pulsar_proxy_descriptor_budget_connections",
			Help: "Client connections the process admits, all listeners together: (open-files limit - session.descriptorReserve) / 2, each connection counted with the broker connection it may need; +Inf without a limit.",
		}),
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_descriptor_budget_used_connections",
			Help: "Client connections counted against the descriptor budget now, by listener (pulsar: both Pulsar listeners; http, https).",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_descriptor_budget_refused_total",
			Help: "Client connections closed as they were accepted because the descriptor budget (or the listener's part of it) was spent, by listener.",
		}, []string{"listener"}),
	}
	if reg != nil {
		reg.MustRegister(m.total, m.used, m.refused)
	}
	return m
}
