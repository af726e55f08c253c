package mux

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the multiplexing layer's series.
type Metrics struct {
	pool        atomic.Pointer[Pool]
	clients     prometheus.Gauge
	dials       *prometheus.CounterVec // result
	dialSeconds prometheus.Histogram
	slowClients prometheus.Counter
	leaveCloses prometheus.Counter
	dropped     prometheus.Counter
	bytes       *prometheus.CounterVec // direction
	bytesUp     prometheus.Counter     // bytes{direction="client_to_broker"}, resolved once
	bytesDown   prometheus.Counter
}

// NewMetrics creates the series and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_multiplex_clients", Help: "Client sessions on multiplexed broker connections now (broker.multiplex).",
		}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_multiplex_dials_total", Help: "Multiplexed broker connections opened, by result (ok, error).",
		}, []string{"result"}),
		dialSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulsar_proxy_multiplex_dial_seconds", Help: "Time to open a multiplexed broker connection (dial and CONNECT).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
		slowClients: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_proxy_multiplex_slow_consumer_disconnects_total", Help: "Clients disconnected because their outbound queue went over broker.multiplexClientQueueBytes (they did not read what their consumers asked for).",
		}),
		leaveCloses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_proxy_multiplex_closes_on_leave_total", Help: "CLOSE_PRODUCER, CLOSE_CONSUMER and WATCH_TOPIC_LIST_CLOSE the proxy sent to brokers for clients that went away.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_proxy_multiplex_dropped_frames_total", Help: "Broker frames for no client (a producer or consumer closed or a client gone) or answers to the proxy's own closes, dropped.",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_multiplex_bytes_total", Help: "Bytes through multiplexed broker connections, by direction.",
		}, []string{"direction"}),
	}
	m.bytesUp = m.bytes.WithLabelValues("client_to_broker")
	m.bytesDown = m.bytes.WithLabelValues("broker_to_client")
	m.dials.WithLabelValues("ok")
	m.dials.WithLabelValues("error")
	if reg == nil {
		return m
	}
	conns := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulsar_proxy_multiplex_broker_connections", Help: "Multiplexed broker connections open now.",
	}, func() float64 { return float64(len(m.conns())) })
	maxClients := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulsar_proxy_multiplex_clients_per_connection_max", Help: "The most clients on one multiplexed broker connection now.",
	}, func() float64 {
		most := 0
		for _, c := range m.conns() {
			most = max(most, c.load())
		}
		return float64(most)
	})
	ids := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulsar_proxy_multiplex_mapped_ids", Help: "Producer, consumer, watcher and request ids mapped on multiplexed broker connections now.",
	}, func() float64 {
		n := 0
		for _, c := range m.conns() {
			n += c.mappedIDs()
		}
		return float64(n)
	})
	reg.MustRegister(m.clients, m.dials, m.dialSeconds, m.slowClients, m.leaveCloses, m.dropped, m.bytes, conns, maxClients, ids)
	return m
}

func (m *Metrics) observe(p *Pool) { m.pool.Store(p) }

func (m *Metrics) conns() []*Conn {
	p := m.pool.Load()
	if p == nil {
		return nil
	}
	return p.all()
}

// SlowConsumerDisconnects is the counter of clients disconnected over their queue's bound.
func (m *Metrics) SlowConsumerDisconnects() prometheus.Counter { return m.slowClients }
