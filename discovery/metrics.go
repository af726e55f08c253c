package discovery

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Metrics are discovery's Prometheus series: each provider's list size, failed refreshes and
// staleness. The only label is the provider's name (a handful).
type Metrics struct {
	discoveryBrokers *prometheus.GaugeVec   // provider
	discoveryErrors  *prometheus.CounterVec // provider
	discoveryStale   *prometheus.GaugeVec   // provider

	stalenessDesc   *prometheus.Desc
	lastSuccessDesc *prometheus.Desc
	mu              sync.Mutex
	sources         []*source
}

// NewMetrics creates the series and registers them with reg (nil: not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		discoveryBrokers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_discovery_brokers", Help: "Brokers in a discovery provider's last good answer.",
		}, []string{"provider"}),
		discoveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_discovery_errors_total", Help: "Failed discovery refreshes (an empty answer counts as one), by provider.",
		}, []string{"provider"}),
		discoveryStale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_discovery_stale", Help: "1 while a provider's last refresh failed and its last good list is in use.",
		}, []string{"provider"}),
		stalenessDesc: prometheus.NewDesc("pulsar_proxy_discovery_staleness_seconds",
			"Seconds a provider's broker list has not been known to be current: 0 while its last refresh succeeded, else the time since the last success (since start before the first).", []string{"provider"}, nil),
		lastSuccessDesc: prometheus.NewDesc("pulsar_proxy_discovery_last_success_timestamp_seconds",
			"Unix time of a provider's last successful refresh (a Consul watch counts until it breaks); 0 before the first.", []string{"provider"}, nil),
	}
	if reg != nil {
		reg.MustRegister(m.discoveryBrokers, m.discoveryErrors, m.discoveryStale, stalenessCollector{m})
	}
	return m
}

// AddStatic exports the discovery_* series of a static list, so that every provider has them
// (a dashboard panel and PulsarProxyDiscoveryStale hold for each): its brokers, no errors,
// never stale, current since start.
func (m *Metrics) AddStatic(s *Static) {
	src := newSource(s.Name(), zerolog.Nop(), m)
	src.succeed(s.list)
}

func (m *Metrics) addSource(s *source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, s)
	m.discoveryBrokers.WithLabelValues(s.name).Set(0)
	m.discoveryErrors.WithLabelValues(s.name).Add(0)
	m.discoveryStale.WithLabelValues(s.name).Set(1)
}

// stalenessCollector computes staleness at scrape time, so it grows while a registry is down
// without anything ticking.
type stalenessCollector struct{ m *Metrics }

func (c stalenessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.stalenessDesc
	ch <- c.m.lastSuccessDesc
}

func (c stalenessCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	sources := append([]*source(nil), c.m.sources...)
	c.m.mu.Unlock()
	for _, s := range sources {
		ch <- prometheus.MustNewConstMetric(c.m.stalenessDesc, prometheus.GaugeValue, s.staleness().Seconds(), s.name)
		var last float64
		if t := s.lastSuccess(); !t.IsZero() {
			last = float64(t.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(c.m.lastSuccessDesc, prometheus.GaugeValue, last, s.name)
	}
}
