package session

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Metrics are the session layer's Prometheus series. Labels stay low-cardinality: modes,
// command types, results, reasons and broker addresses (a handful), never topics.
type Metrics struct {
	activeSessions    *prometheus.GaugeVec   // mode
	sessions          *prometheus.CounterVec // mode
	brokerSessions    *prometheus.CounterVec // broker
	lookups           *prometheus.CounterVec // type, result
	lookupSeconds     *prometheus.HistogramVec
	frames            *prometheus.CounterVec // direction
	bytes             *prometheus.CounterVec // direction
	handshakeFailures *prometheus.CounterVec // reason
	closes            *prometheus.CounterVec // reason
	brokerDialSeconds prometheus.Histogram
	clientIPs         prometheus.Gauge       // distinct client IPs (IPv6: prefixes) with a live connection; never an IP label
	refusedCommands   *prometheus.CounterVec // reason
	limited           *prometheus.CounterVec // limit
	lookupsInFlight   prometheus.Gauge
	publishPaused     prometheus.Counter
	stalled           *prometheus.CounterVec // reason
	watchers          prometheus.Gauge
	routed            *prometheus.CounterVec // result
}

// newGuardMetrics makes the series of what guards the proxy: the limits, the stall watchdog
// and the topic-list watchers.
func (m *Metrics) newGuardMetrics() {
	m.watchers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pulsar_proxy_topic_list_watchers", Help: "Topic-list watchers (WATCH_TOPIC_LIST) open through the proxy: on lookup connections (opened by the proxy on a pooled broker connection) and in inspected direct sessions; with a policy their topics are filtered by it.",
	})
	m.stalled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulsar_proxy_stalled_sessions_total", Help: "Direct sessions closed by the stall watchdog (session.stallTimeout), by reason: client_stalled (part of a frame, then nothing), client_not_reading, broker_stalled.",
	}, []string{"reason"})
	m.publishPaused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pulsar_proxy_publish_paused_seconds_total", Help: "Time sessions (direct binary sessions, WebSocket producers) stopped reading from their clients to hold a role to its publish rate (policy limits), summed over sessions.",
	})
}

// PublishPaused is where other planes holding a role to its publish rate add their pauses
// (seconds), so that one series shows the role limit's effect on every plane.
func (m *Metrics) PublishPaused() prometheus.Counter { return m.publishPaused }

// Directions as metric label values.
const (
	toBroker = "client_to_broker"
	toClient = "broker_to_client"
)

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		activeSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_sessions_active", Help: "Client connections open now, by mode (handshake, lookup, direct, routed).",
		}, []string{"mode"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_sessions_total", Help: "Client connections that reached a mode, by mode.",
		}, []string{"mode"}),
		brokerSessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_broker_sessions_total", Help: "Direct sessions established, by broker.",
		}, []string{"broker"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_lookups_total", Help: "Lookup-mode requests answered, by command type and result.",
		}, []string{"type", "result"}),
		lookupSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pulsar_proxy_lookup_seconds", Help: "Time to answer a lookup-mode request, redirects included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}, []string{"type"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_frames_total", Help: "Frames forwarded in direct sessions, by direction.",
		}, []string{"direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_bytes_total", Help: "Bytes forwarded in direct sessions, by direction.",
		}, []string{"direction"}),
		handshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_handshake_failures_total", Help: "Client connections that ended before a working session, by reason.",
		}, []string{"reason"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_session_closes_total", Help: "Ended client connections, by close reason.",
		}, []string{"reason"}),
		brokerDialSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulsar_proxy_broker_dial_seconds", Help: "Time to dial a broker and finish its CONNECT for a direct session.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
		clientIPs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_client_ips_active", Help: "Distinct client IPs with a live connection (the PROXY header's address where one was accepted; an IPv6 client counted by its session.ipv6PrefixLength prefix).",
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_limited_total", Help: "Client requests and connections refused by a limit: a role's connections or lookup rate (policy limits), the lookups in flight (session.maxLookupsInFlight), by limit.",
		}, []string{"limit"}),
		lookupsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_lookups_in_flight", Help: "Lookup-mode requests being answered now, all clients together (bounded by session.maxLookupsInFlight).",
		}),
		refusedCommands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_refused_commands_total", Help: "Client commands in direct sessions that ended the session: a type no client may send to a broker, one that cannot be decoded, or proxy-only fields, by reason.",
		}, []string{"reason"}),
	}
	m.newGuardMetrics()
	m.routed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulsar_proxy_routed_lookups_total", Help: "Owners looked up for routed sessions' producers, consumers, coordinators and schemas, by result: ok, moved (another broker than before: the client's producer or consumer follows its topic), failed.",
	}, []string{"result"})
	reg.MustRegister(m.routed, m.watchers, m.stalled, m.limited, m.lookupsInFlight, m.publishPaused, m.refusedCommands, m.activeSessions, m.sessions, m.brokerSessions, m.lookups, m.lookupSeconds,
		m.frames, m.bytes, m.handshakeFailures, m.closes, m.brokerDialSeconds, m.clientIPs)
	m.initSeries()
	return m
}

// lookupTypes and lookupResults are the label values of pulsar_proxy_lookups_total.
var (
	lookupTypes = []string{pb.BaseCommand_LOOKUP.String(), pb.BaseCommand_PARTITIONED_METADATA.String(),
		pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.String(), pb.BaseCommand_GET_SCHEMA.String(), pb.BaseCommand_WATCH_TOPIC_LIST.String()}
	lookupResults = []string{"ok", "failed", "denied", "rejected", "error"}
)

// initSeries makes every series whose label values are known in advance, at 0, so that a
// scrape shows them from the start: a rate() or a ratio in an alert then counts the first
// event too (a series that appears at 1 has no earlier sample to rise from), and a dashboard
// shows 0 rather than no data. Broker labels are made as brokers join the live set (Broker).
func (m *Metrics) initSeries() {
	for _, r := range []string{"ok", "moved", "failed"} {
		m.routed.WithLabelValues(r)
	}
	for _, mode := range []mode{modeHandshake, modeLookup, modeDirect, modeRouted} {
		m.activeSessions.WithLabelValues(mode.String())
		if mode != modeHandshake {
			m.sessions.WithLabelValues(mode.String())
		}
	}
	for _, d := range []string{toBroker, toClient} {
		m.frames.WithLabelValues(d)
		m.bytes.WithLabelValues(d)
	}
	for _, r := range closeReasons {
		m.closes.WithLabelValues(string(r))
		if r.beforeSession() {
			m.handshakeFailures.WithLabelValues(string(r))
		}
	}
	for _, r := range []edge.Reason{edge.ReasonType, edge.ReasonUndecodable, edge.ReasonForged} {
		m.refusedCommands.WithLabelValues(string(r))
	}
	for _, l := range []string{limitRoleConnections, limitRoleLookupRate, limitLookupsInFlight} {
		m.limited.WithLabelValues(l)
	}
	for _, r := range []CloseReason{ReasonClientStalled, ReasonClientNotReading, ReasonBrokerStalled} {
		m.stalled.WithLabelValues(string(r))
	}
	for _, t := range lookupTypes {
		m.lookupSeconds.WithLabelValues(t)
		for _, r := range lookupResults {
			m.lookups.WithLabelValues(t, r)
		}
	}
}

// Broker makes the series of a broker that joined the live set, at 0 (initSeries cannot: the
// brokers are known only once discovery lists them).
func (m *Metrics) Broker(addr string) {
	m.brokerSessions.WithLabelValues(addr)
}
