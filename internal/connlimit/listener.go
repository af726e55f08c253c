package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
)

// Limits are one listener's admission limits; a zero field is no limit.
type Limits struct {
	MaxConnections   int     // open at once on the listener
	MaxPerIP         int     // open at once from one client (see Key)
	RatePerIP        float64 // new connections per second from one client
	BurstPerIP       int     // at once above RatePerIP
	IPv6PrefixLength int     // an IPv6 client is counted by this prefix; 0: DefaultIPv6PrefixLength
}

// ListenerConfig configures NewListener.
type ListenerConfig struct {
	Name   string // the listener in metrics and logs, e.g. "http"
	Limits Limits
	Share  *Share // the listener's part of the descriptor budget; nil: none
	// Refusal is written to a refused connection before it is closed, to tell a plaintext
	// client why; nil closes it without a word (over TLS an answer would need the handshake
	// the refusal is there to save).
	Refusal []byte
	Metrics *ListenerMetrics // nil: counted, not registered
	Log     zerolog.Logger
	// Refusals is told of every connection refused, for the log's summaries; nil: not.
	Refusals Refusals
}

// Refusals is where a listener reports the connections it refuses (refusal.Summary).
type Refusals interface {
	Refused(k refusal.Kind, detail, remote, told string)
}

// Reasons a connection is refused: a metric label, the same words as the Pulsar listeners'
// close reasons.
const (
	ReasonTooManyConnections = "too_many_connections"
	ReasonTooManyFromIP      = "too_many_connections_per_ip"
	ReasonConnectRate        = "connection_rate_per_ip"
	ReasonDescriptors        = "descriptor_budget"
)

var reasons = []string{ReasonTooManyConnections, ReasonTooManyFromIP, ReasonConnectRate, ReasonDescriptors}

// NewListener applies c's limits to the connections ln accepts: one over a limit is closed in
// Accept, after c.Refusal if set, so it holds no descriptor and no goroutine. The limits apply
// to the socket's peer address, so ln must read no PROXY header (where a header is trusted the
// real client is known only after it; the Pulsar listeners check there, in the session). Wrap
// it under TLS (tls.NewListener over it), so a refused client costs no handshake.
func NewListener(ln net.Listener, c ListenerConfig) net.Listener {
	if c.Metrics == nil {
		c.Metrics = NewListenerMetrics(nil)
	}
	for _, r := range reasons {
		c.Metrics.refused.WithLabelValues(c.Name, r)
	}
	lim := c.Limits
	return &limited{
		Listener: ln,
		c:        c,
		perIP:    NewPerIP(lim.MaxPerIP, lim.IPv6PrefixLength, c.Metrics.clientIPs.WithLabelValues(c.Name)),
		rate:     NewRate(lim.RatePerIP, lim.BurstPerIP, lim.IPv6PrefixLength),
		openG:    c.Metrics.open.WithLabelValues(c.Name),
	}
}

type limited struct {
	net.Listener
	c     ListenerConfig
	perIP *PerIP
	rate  *Rate
	open  atomic.Int64
	openG prometheus.Gauge
}

// Accept returns the next connection within the limits, closing those over them.
func (l *limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, reason := l.admit(c.RemoteAddr())
		if reason == "" {
			l.openG.Inc()
			return &conn{Conn: c, release: func() { l.openG.Dec(); release() }}, nil
		}
		l.refuse(c, reason)
	}
}

// admit takes what a new connection from addr holds; reason is why it is refused ("": taken,
// and release gives it all back).
func (l *limited) admit(addr net.Addr) (release func(), reason string) {
	if n := l.open.Add(1); l.c.Limits.MaxConnections > 0 && n > int64(l.c.Limits.MaxConnections) {
		l.open.Add(-1)
		return nil, ReasonTooManyConnections
	}
	if !l.rate.Allow(addr) {
		l.open.Add(-1)
		return nil, ReasonConnectRate
	}
	ipRelease, ok := l.perIP.Acquire(addr)
	if !ok {
		l.open.Add(-1)
		return nil, ReasonTooManyFromIP
	}
	fdRelease := func() {}
	if l.c.Share != nil {
		if fdRelease, ok = l.c.Share.Acquire(HTTPDescriptors); !ok {
			ipRelease()
			l.open.Add(-1)
			return nil, ReasonDescriptors
		}
	}
	return func() { fdRelease(); ipRelease(); l.open.Add(-1) }, ""
}

// HTTPDescriptors is what an HTTP connection counts for in the descriptor budget: its own, and
// the one an admin request opens to a broker's web service (or its spooled body).
const HTTPDescriptors = 2

// refuseWriteTimeout bounds telling a refused client why, in the accepting goroutine: the
// answer fits any fresh socket's send buffer, so this is only a backstop.
const refuseWriteTimeout = 50 * time.Millisecond

func (l *limited) refuse(c net.Conn, reason string) {
	l.c.Metrics.refused.WithLabelValues(l.c.Name, reason).Inc()
	l.c.Log.Debug().Str("listener", l.c.Name).Stringer("remote", c.RemoteAddr()).Str("reason", reason).
		Msg("refused a connection over a limit")
	if l.c.Refusals != nil {
		l.c.Refusals.Refused(refusal.ConnectionLimit, l.c.Name+" "+reason, c.RemoteAddr().String(), "")
	}
	if l.c.Refusal != nil {
		c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
		c.Write(l.c.Refusal)
	}
	c.Close()
}

// conn gives back what its admission took when it is closed (once, however often Close is
// called).
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the socket: net/http does so before closing a connection after an
// error answer, so the client reads the answer rather than a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ListenerMetrics are the series of listeners made by NewListener: the HTTP plane's
// (listen.http, admin.listenHTTPS), hence their names; the Pulsar listeners count refusals in
// pulsar_proxy_handshake_failures_total. Label values are listener names and the reasons.
type ListenerMetrics struct {
	open      *prometheus.GaugeVec
	clientIPs *prometheus.GaugeVec
	refused   *prometheus.CounterVec
}

// NewListenerMetrics registers the series with reg (nil: not registered).
func NewListenerMetrics(reg prometheus.Registerer) *ListenerMetrics {
	m := &ListenerMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_http_connections_open",
			Help: "Client connections open now on an HTTP listener (listen.http, admin.listenHTTPS), by listener.",
		}, []string{"listener"}),
		clientIPs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_http_client_ips_active",
			Help: "Distinct client IPs (IPv6: session.ipv6PrefixLength prefixes) with an open connection on an HTTP listener, by listener; never an IP label.",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_http_connections_refused_total",
			Help: "Connections closed as an HTTP listener accepted them, by listener and reason: too_many_connections (session.maxConnections), too_many_connections_per_ip (session.maxConnectionsPerIP), connection_rate_per_ip (session.connectionRatePerIP), descriptor_budget.",
		}, []string{"listener", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.open, m.clientIPs, m.refused)
	}
	return m
}
