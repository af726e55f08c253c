package sni

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
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Targets checks a server name against the live brokers (brokers.Set.AllowSNI).
type Targets interface {
	AllowSNI(name string) (brokers.Broker, brokers.SNIMatch, error)
}

// Gate is the decision point's word on relaying a stream unread (edge.Edge.Opaque).
type Gate interface {
	Opaque() edge.Decision
}

// Descriptors counts descriptors against the listener's part of the process's budget
// (connlimit.Share): two per connection, the client's and its broker's, taken as it is
// accepted.
type Descriptors interface {
	Acquire(n int64) (release func(), ok bool)
}

// Config is what the plane needs from the process configuration.
type Config struct {
	Targets Targets
	Gate    Gate
	// Dialer reaches brokers: TCP and, when it has a ProxyHeader, a PROXY header ahead of
	// the client's TLS (sni.proxyProtocol). Its TLS must be nil: the TLS is the client's.
	Dialer *upstream.Dialer
	// Proxy reads PROXY headers from a load balancer in front (proxyProtocol.*).
	Proxy listener.ProxyOptions
	// HandshakeTimeout bounds the PROXY header and the ClientHello together.
	HandshakeTimeout time.Duration
	MaxHelloBytes    int // the largest ClientHello read (sni.maxClientHelloBytes)
	// Limits are the session.* connection limits, applied to this listener's connections
	// on their own (per IP once a PROXY header named the real client).
	Limits       connlimit.Limits
	Descriptors  Descriptors   // nil: no budget
	SummaryLevel zerolog.Level // the one line per ended connection; zerolog.Disabled: none
	Log          zerolog.Logger
	Metrics      *Metrics
}

// halfCloseWait bounds how long one side may keep its half of a connection open after the
// other closed its own, and how long an ending relay waits for its second direction.
const halfCloseWait = 30 * time.Second

// Server accepts SNI connections and relays each to its broker.
type Server struct {
	cfg     Config
	m       *Metrics
	buffers *forward.Buffers
	perIP   *connlimit.PerIP
	rate    *connlimit.Rate
	nextID  atomic.Uint64

	forced      context.Context // cancelled when Shutdown's deadline passes: dials in progress end
	forceCancel context.CancelFunc

	idleOnce sync.Once
	idle     *idlewait.Poller // where idle relays' sockets wait; nil: on goroutines

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	draining  bool
	wg        sync.WaitGroup
}

// ErrNoSplice is NewServer's error where the kernel cannot move bytes socket to socket.
var ErrNoSplice = errors.New("the SNI plane relays with splice(2), which this platform lacks")

// NewServer makes the plane; it accepts nothing until Serve.
func NewServer(cfg Config) (*Server, error) {
	if !forward.CanPassthrough {
		return nil, ErrNoSplice
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	s := &Server{cfg: cfg, m: cfg.Metrics, buffers: forward.NewBuffers(),
		perIP:     connlimit.NewPerIP(cfg.Limits.MaxPerIP, cfg.Limits.IPv6PrefixLength, cfg.Metrics.clientIPs),
		rate:      connlimit.NewRate(cfg.Limits.RatePerIP, cfg.Limits.BurstPerIP, cfg.Limits.IPv6PrefixLength),
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}}
	s.forced, s.forceCancel = context.WithCancel(context.Background())
	return s, nil
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("sni server closed")

// Serve accepts connections on ln (a bare TCP listener: the plane reads any PROXY header
// itself) until Shutdown. A failed accept is retried with backoff unless ln is closed.
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
			s.cfg.Log.Debug().Err(err).Msg("idle SNI relays will wait on goroutines")
		}
	})
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
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			jsonlog.Seconds(s.cfg.Log.Warn().Err(err), "retry_in", backoff).Msg("accepting an SNI connection failed; retrying")
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

// start runs c's connection on a goroutine of its own after the limits that need no address
// (the listener's count, the descriptor budget); false means the server is draining.
func (s *Server) start(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close() // only TCP is relayed
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	if max := s.cfg.Limits.MaxConnections; max > 0 && len(s.conns) >= max {
		s.refuseAtAccept(tc, ReasonTooManyConnections)
		return true
	}
	release := func() {}
	if s.cfg.Descriptors != nil {
		var ok bool
		if release, ok = s.cfg.Descriptors.Acquire(2); !ok {
			s.refuseAtAccept(tc, ReasonDescriptors)
			return true
		}
	}
	cn := newConn(s, tc, s.nextID.Add(1))
	cn.atEnd(release)
	s.conns[cn] = struct{}{}
	s.wg.Add(1)
	go cn.run()
	return true
}

// refuseAtAccept closes a connection over a limit in the accepting goroutine, after a fatal
// alert (internal_error) that a TLS client reads as the answer to its ClientHello: no
// goroutine, no read, no handshake.
func (s *Server) refuseAtAccept(c *net.TCPConn, r Reason) {
	s.m.refused.WithLabelValues(string(r)).Inc()
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	c.Write(alertRecord(AlertInternalError))
	c.Close()
}

// forget drops a connection that has ended.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// Draining reports whether Shutdown has begun.
func (s *Server) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Shutdown stops accepting and hands every connection over: the plane stops reading clients
// (a connection still reading its ClientHello is closed, the client retries elsewhere), lets
// what brokers are still sending reach them until it goes quiet, then closes both sides, and
// the clients reconnect through another proxy. Connections still open when ctx ends are
// closed; Shutdown waits for all of them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.drain()
	}
	s.idleOnce.Do(func() {})
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	defer func() {
		<-done
		if s.idle != nil {
			s.idle.Close()
		}
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.forceCancel()
	s.mu.Lock()
	for c := range s.conns {
		c.close(ReasonShutdown)
	}
	s.mu.Unlock()
	return ctx.Err()
}
