// Package session runs client connections: the CONNECT handshake, lookup mode (the proxy
// answers lookups itself) and direct mode (frames forwarded to the owning broker).
package session

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/forward"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Config holds what sessions need from the process configuration.
type Config struct {
	ServerVersion     string // CONNECTED.server_version and CONNECT.proxy_version, e.g. "pulsar-proxy/1.0.0"
	ProtocolVersion   int32  // highest protocol version the proxy speaks
	MaxFrameSize      int
	MaxMessageSize    int32 // announced in CONNECTED in lookup mode
	HandshakeTimeout  time.Duration
	KeepAliveInterval time.Duration
	MaxPendingLookups int
	// StallTimeout closes a direct session whose client (or broker) sent part of a frame and
	// then nothing, or has not taken what was written to it, for this long. 0 = never.
	StallTimeout time.Duration
	// MaxLookupsInFlight bounds the lookups being answered at once, all clients together: one
	// is counted from the client's request until the broker's answer (not its sending). Over
	// it a client gets TooManyRequests, which clients retry. 0 = unbounded.
	MaxLookupsInFlight int
	MaxConnections     int // 0 = unlimited
	// Upstream is how direct sessions reach brokers (dial, TLS, PROXY header) and introduce
	// the proxy and the client there (the broker CONNECT).
	Upstream     *upstream.Connector
	SummaryLevel zerolog.Level // level of the one line logged per ended session; Disabled = none
	// Multiplex, when set (broker.multiplex), carries direct sessions over shared broker
	// connections, per broker and principal, instead of one connection each.
	Multiplex *mux.Pool
	// Routed, when set, serves clients that use the proxy as their broker (routed sessions:
	// they looked their topics up over HTTP) over its shared connections, per broker and
	// principal; nil refuses their producers and consumers as a lookup connection does.
	Routed *mux.Pool
	// Passthrough lets a direct session without authentication or authorization forward
	// socket to socket without reading frames (see pipe.passthrough).
	Passthrough bool

	// Per client IP, the PROXY header's where one was accepted; 0 = unlimited.
	MaxConnectionsPerIP int
	// New connections per second per client IP, and the burst above it; 0 = unlimited.
	ConnectionRatePerIP  float64
	ConnectionBurstPerIP int
	// Both per-IP limits count an IPv6 client by the prefix of this many bits of its
	// address (IPv4 by the whole address); 0 = DefaultIPv6PrefixLength.
	IPv6PrefixLength int
	// Descriptors is the Pulsar listeners' part of the process's descriptor budget
	// (connlimit.Share): a connection it refuses is closed as it is accepted, like one over
	// MaxConnections. nil: no budget.
	Descriptors Descriptors
	// Refusals is told of every client turned away (authentication, limits, bad frames, TLS
	// on a plaintext listener, its broker unavailable), for the log's summaries; nil: not.
	Refusals Refusals
}

// Descriptors counts descriptors against those the process gives its clients: a client's
// connection as it is accepted, a direct session's broker connection as it dials; release
// gives them back when they are closed.
type Descriptors interface {
	Acquire(n int64) (release func(), ok bool)
}

// Resolver answers lookup-mode requests (LOOKUP, PARTITIONED_METADATA,
// GET_TOPICS_OF_NAMESPACE, GET_SCHEMA) by asking brokers.
type Resolver interface {
	Resolve(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error)
}

// Targets decides which direct-mode targets may be dialled.
type Targets interface {
	Allow(target string) (brokers.Broker, error)
}

// Server accepts client connections and runs one session per connection.
type Server struct {
	cfg      Config
	resolver Resolver
	targets  Targets
	metrics  *Metrics
	sec      Security
	log      zerolog.Logger
	nextID   atomic.Uint64

	buffers     *forward.Buffers // read buffers and splice pipes of direct-mode pipes, shared by all sessions
	spliceAbove int              // forward.Config.SpliceAbove; 0: the default; benchmarks vary it
	clientIPs   *connlimit.PerIP // live connections per client IP, for MaxConnectionsPerIP
	connectRate *connlimit.Rate  // new connections per client IP; nil = unlimited
	lookups     chan struct{}    // one per lookup being answered, at most MaxLookupsInFlight; nil = unbounded

	watchdog  sync.Once     // the stall watchdog, started by the first Serve
	stopWatch chan struct{} // closed by Shutdown

	forced      context.Context // cancelled when Shutdown's deadline passes (see shutdown)
	forceCancel context.CancelFunc

	idleOnce sync.Once        // the poller, started by the first Serve
	idle     *idlewait.Poller // where idle sessions' sockets wait (idle.go); nil: on goroutines

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sessions  map[*session]struct{}
	watched   map[*stalls]struct{} // direct sessions the stall watchdog looks at
	draining  bool
	wg        sync.WaitGroup
}

// NewServer wires a server; it does nothing until Serve.
func NewServer(cfg Config, resolver Resolver, targets Targets, m *Metrics, log zerolog.Logger) *Server {
	if cfg.IPv6PrefixLength == 0 {
		cfg.IPv6PrefixLength = DefaultIPv6PrefixLength
	}
	srv := &Server{
		cfg: cfg, resolver: resolver, targets: targets, metrics: m, log: log,
		buffers:     forward.NewBuffers(),
		clientIPs:   connlimit.NewPerIP(cfg.MaxConnectionsPerIP, cfg.IPv6PrefixLength, m.clientIPs),
		connectRate: connlimit.NewRate(cfg.ConnectionRatePerIP, cfg.ConnectionBurstPerIP, cfg.IPv6PrefixLength),
		sec:         Security{Edge: edge.New(edge.Config{}), RefreshTimeout: 10 * time.Second},
		listeners:   map[net.Listener]struct{}{},
		sessions:    map[*session]struct{}{},
		watched:     map[*stalls]struct{}{},
	}
	if cfg.MaxLookupsInFlight > 0 {
		srv.lookups = make(chan struct{}, cfg.MaxLookupsInFlight)
	}
	srv.stopWatch = make(chan struct{})
	srv.forced, srv.forceCancel = context.WithCancel(context.Background())
	m.lookupsInFlight.Set(0)
	return srv
}

// DefaultIPv6PrefixLength is the IPv6 prefix the per-IP limits count a client by when Config
// does not say (see connlimit.Key).
const DefaultIPv6PrefixLength = connlimit.DefaultIPv6PrefixLength

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("session server closed")

// Serve accepts connections on ln until Shutdown. An accept error is retried (see
// acceptRetry) unless the listener is closed: out of file descriptors or kernel memory, a
// connection aborted before it was accepted, anything else, the proxy keeps its sessions
// and accepts again once it can.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.idleOnce.Do(func() {
		var err error
		if s.idle, err = idlewait.New(); err != nil {
			s.log.Debug().Err(err).Msg("idle sessions will wait on goroutines")
		}
	})
	if s.cfg.StallTimeout > 0 {
		s.watchdog.Do(func() {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.watchStalls(s.stopWatch) }()
		})
	}
	s.mu.Unlock()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.Draining() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			backoff = s.acceptRetry(err, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !s.start(c) {
			c.Close()
			return ErrServerClosed
		}
	}
}

// acceptRetry logs a failed accept and returns how long to wait before the next: 5 ms
// doubling to 1 s while accepts keep failing, so a lasting condition neither spins nor
// floods the log (the first failure after a success is a warning, the repeats debug).
func (s *Server) acceptRetry(err error, prev time.Duration) time.Duration {
	next := min(max(2*prev, 5*time.Millisecond), time.Second)
	ev := s.log.Debug()
	if prev == 0 {
		ev = s.log.Warn()
	}
	jsonlog.Seconds(ev.Err(err), "retry_in", next).Msg("accepting a client connection failed; retrying")
	return next
}

// start runs c's session in a goroutine of its own; false means the server is draining.
func (s *Server) start(c net.Conn) bool {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return false
	}
	if s.cfg.MaxConnections > 0 && len(s.sessions) >= s.cfg.MaxConnections {
		s.mu.Unlock()
		s.refuse(c, ReasonTooManyConnections)
		return true
	}
	var releaseFD func()
	if s.cfg.Descriptors != nil {
		var ok bool
		if releaseFD, ok = s.cfg.Descriptors.Acquire(1); !ok {
			s.mu.Unlock()
			s.refuse(c, ReasonDescriptors)
			return true
		}
	}
	sess := newSession(s, c, s.nextID.Add(1))
	sess.releaseFD = releaseFD
	s.sessions[sess] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go sess.run()
	return true
}

// forget drops a session that has ended (session.end).
func (s *Server) forget(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
	s.wg.Done()
}

// refuseWriteTimeout bounds telling a refused client why, which happens in the accepting
// goroutine: the frame fits any fresh socket's send buffer, so this is only a backstop.
const refuseWriteTimeout = 50 * time.Millisecond

// tooManyConnections is the frame a plain client over session.maxConnections (or the
// descriptor budget) gets, encoded once: a flood over the limit costs no allocation per
// connection.
var tooManyConnections, _ = frame.AppendCommand(nil,
	frame.Error(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: too many connections, retry later"))

// refuse turns away a connection over session.maxConnections or the descriptor budget in the
// accepting goroutine, before any TLS handshake or PROXY header and with no goroutine of its
// own, so connections over the limit cost an accept and a close, never a handshake each. A
// plain client is told why (ServiceNotReady, so it retries); a TLS or PROXY-protocol one could
// be told only after the handshake the limit is there to avoid, so it is just closed.
func (s *Server) refuse(c net.Conn, reason CloseReason) {
	s.metrics.handshakeFailures.WithLabelValues(string(reason)).Inc()
	s.metrics.closes.WithLabelValues(string(reason)).Inc()
	if s.cfg.Refusals != nil {
		s.cfg.Refusals.Refused(refusal.ConnectionLimit, string(reason), c.RemoteAddr().String(), "")
	}
	s.log.Debug().Stringer("remote", c.RemoteAddr()).Int("max_connections", s.cfg.MaxConnections).Str("reason", string(reason)).
		Msg("refusing a client connection over session.maxConnections or the descriptor budget")
	if _, handshake := c.(transport); !handshake {
		c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
		c.Write(tooManyConnections)
	}
	c.Close()
}

// Shutdown stops accepting and asks every session to hand its client over (see
// session.drain): lookup sessions finish the lookups in flight, direct sessions stop
// forwarding the client's requests and deliver the broker's answers until it goes quiet,
// then both close, and clients reconnect through another proxy. Sessions still open when
// ctx is done are closed; Shutdown waits for all of them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for ln := range s.listeners {
		ln.Close()
	}
	for sess := range s.sessions {
		sess.drain()
	}
	s.watchdog.Do(func() {}) // none may start after this
	s.idleOnce.Do(func() {})
	select {
	case <-s.stopWatch:
	default:
		close(s.stopWatch)
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	defer s.stopIdle(done)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.forceCancel()
	s.mu.Lock()
	for sess := range s.sessions {
		sess.shutdown()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// stopIdle stops the poller once every session has ended (done).
func (s *Server) stopIdle(done <-chan struct{}) {
	<-done
	if s.idle != nil {
		s.idle.Close()
	}
}

// Draining reports whether Shutdown has begun; readiness turns false then.
func (s *Server) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// takeLookup counts a lookup in flight; false when MaxLookupsInFlight are. The lookup is
// given back with giveLookup once answered.
func (s *Server) takeLookup() bool {
	if s.lookups != nil {
		select {
		case s.lookups <- struct{}{}:
		default:
			return false
		}
	}
	s.metrics.lookupsInFlight.Inc()
	return true
}

func (s *Server) giveLookup() {
	s.metrics.lookupsInFlight.Dec()
	if s.lookups != nil {
		<-s.lookups
	}
}
