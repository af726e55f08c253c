package sni

import "github.com/prometheus/client_golang/prometheus"

// Reason says why an SNI connection ended: a metric label and a log field, so the set is
// fixed and small. The first group ends a connection before a byte reached a broker (a
// refusal); the second a relayed one.
type Reason string

const (
	ReasonTooManyConnections Reason = "too_many_connections"        // session.maxConnections on this listener
	ReasonDescriptors        Reason = "descriptor_budget"           // the listener's part of the descriptor budget
	ReasonTooManyFromIP      Reason = "too_many_connections_per_ip" // session.maxConnectionsPerIP
	ReasonConnectRate        Reason = "connection_rate_per_ip"      // session.connectionRatePerIP
	ReasonTransportSetup     Reason = "transport_setup_failed"      // the PROXY header
	ReasonHandshakeTimeout   Reason = "handshake_timeout"           // no whole ClientHello within session.handshakeTimeout
	ReasonClientGone         Reason = "client_closed_early"         // closed before its ClientHello was whole
	ReasonNotTLS             Reason = "not_tls"                     // ErrNotTLS
	ReasonMalformed          Reason = "malformed_client_hello"      // ErrMalformed
	ReasonTooLarge           Reason = "client_hello_too_large"      // ErrTooLarge (sni.maxClientHelloBytes)
	ReasonNoServerName       Reason = "no_server_name"              // a hello without server_name
	ReasonNotABroker         Reason = "not_a_broker"                // a name that is neither a live broker nor a service name
	ReasonAmbiguous          Reason = "ambiguous_name"              // a name several live brokers share
	ReasonNoBroker           Reason = "no_broker"                   // a service name while discovery lists no TLS broker
	ReasonPolicy             Reason = "policy_in_force"             // the decision point refuses unread relays
	ReasonBrokerUnreachable  Reason = "broker_unreachable"          // the dial (or the PROXY header to it) failed
	ReasonDrainedEarly       Reason = "drained_before_relay"        // the proxy began draining during the handshake

	ReasonClientClosed Reason = "client_closed"
	ReasonBrokerClosed Reason = "broker_closed"
	ReasonIOError      Reason = "io_error"
	ReasonDrained      Reason = "drained"  // handed over on drain
	ReasonShutdown     Reason = "shutdown" // still open at the drain deadline
)

var refusals = []Reason{ReasonTooManyConnections, ReasonDescriptors, ReasonTooManyFromIP, ReasonConnectRate,
	ReasonTransportSetup, ReasonHandshakeTimeout, ReasonClientGone, ReasonNotTLS, ReasonMalformed, ReasonTooLarge,
	ReasonNoServerName, ReasonNotABroker, ReasonAmbiguous, ReasonNoBroker, ReasonPolicy, ReasonBrokerUnreachable,
	ReasonDrainedEarly}

var relayEnds = []Reason{ReasonClientClosed, ReasonBrokerClosed, ReasonIOError, ReasonDrained, ReasonShutdown}

// Metrics are the SNI plane's series (pulsar_proxy_sni_*); no label holds a name or an
// address.
type Metrics struct {
	active    *prometheus.GaugeVec
	refused   *prometheus.CounterVec
	relayed   *prometheus.CounterVec
	closes    *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	dial      prometheus.Histogram
	helloSize prometheus.Histogram
	clientIPs prometheus.Gauge
	frames    prometheus.Counter // the pipes' frame count: always 0 for an unframed stream, not exported
}

// NewMetrics registers the series with reg (nil: not registered), every label value made at
// once so dashboards see zeros rather than gaps.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pulsar_proxy_sni_connections_active",
			Help: "SNI connections open now, by state: handshake (reading the ClientHello, dialling) or relaying."}, []string{"state"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pulsar_proxy_sni_refused_total",
			Help: "SNI connections closed before a byte reached a broker, by reason (docs/sni.md)."}, []string{"reason"}),
		relayed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pulsar_proxy_sni_relayed_total",
			Help: "SNI connections relayed to a broker, by how the server name matched: broker (a live broker's TLS host) or service (sni.serviceNames)."}, []string{"match"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pulsar_proxy_sni_closes_total",
			Help: "Relayed SNI connections that ended, by reason."}, []string{"reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pulsar_proxy_sni_bytes_total",
			Help: "Bytes relayed on SNI connections, by direction (to_broker, to_client), the ClientHello included."}, []string{"direction"}),
		dial: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pulsar_proxy_sni_broker_dial_seconds",
			Help: "Time to connect to the broker an SNI connection names (TCP and any PROXY header).", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 10)}),
		helloSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pulsar_proxy_sni_client_hello_bytes",
			Help: "Size of the ClientHellos read (the handshake message), relayed or not.", Buckets: prometheus.ExponentialBuckets(128, 2, 9)}),
		clientIPs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pulsar_proxy_sni_client_ips_active",
			Help: "Distinct client IPs (IPv6: session.ipv6PrefixLength prefixes) with an open SNI connection; never an IP label."}),
		frames: prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_proxy_sni_frames"}),
	}
	for _, s := range []string{"handshake", "relaying"} {
		m.active.WithLabelValues(s)
	}
	for _, r := range refusals {
		m.refused.WithLabelValues(string(r))
	}
	for _, r := range relayEnds {
		m.closes.WithLabelValues(string(r))
	}
	for _, s := range []string{"broker", "service"} {
		m.relayed.WithLabelValues(s)
	}
	for _, d := range []string{toBroker, toClient} {
		m.bytes.WithLabelValues(d)
	}
	if reg != nil {
		reg.MustRegister(m.active, m.refused, m.relayed, m.closes, m.bytes, m.dial, m.helloSize, m.clientIPs)
	}
	return m
}

const (
	toBroker = "to_broker"
	toClient = "to_client"
)
