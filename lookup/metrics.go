package lookup

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Metrics are the resolver's Prometheus series: the requests it sent to brokers and the
// lookups it coalesced. Labels are command types and broker addresses (a handful) only.
type Metrics struct {
	brokerRequests *prometheus.CounterVec // type, broker
	coalesced      *prometheus.CounterVec // type
}

// NewMetrics creates the series and registers them with reg (nil: not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		brokerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_broker_lookup_requests_total", Help: "Requests the proxy sent to brokers to answer lookup-mode clients, by command type and broker (redirect hops and retries on another broker included).",
		}, []string{"type", "broker"}),
		coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_lookups_coalesced_total", Help: "Lookup-mode requests answered from an identical request already in flight, by command type.",
		}, []string{"type"}),
	}
	if reg != nil {
		reg.MustRegister(m.brokerRequests, m.coalesced)
	}
	// The commands that are coalesced (see Resolver) have their series from the start, at 0.
	for _, t := range []pb.BaseCommand_Type{pb.BaseCommand_LOOKUP, pb.BaseCommand_PARTITIONED_METADATA} {
		m.coalesced.WithLabelValues(t.String())
	}
	return m
}

// brokerRequestTypes are the commands the proxy sends brokers for lookup-mode clients.
var brokerRequestTypes = []pb.BaseCommand_Type{pb.BaseCommand_LOOKUP, pb.BaseCommand_PARTITIONED_METADATA,
	pb.BaseCommand_GET_TOPICS_OF_NAMESPACE, pb.BaseCommand_GET_SCHEMA, pb.BaseCommand_WATCH_TOPIC_LIST}

// Broker makes the series of a broker that joined the live set, at 0, so that a dashboard
// shows it before its first request.
func (m *Metrics) Broker(addr string) {
	for _, t := range brokerRequestTypes {
		m.brokerRequests.WithLabelValues(t.String(), addr)
	}
}
