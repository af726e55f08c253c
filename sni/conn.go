package sni

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// conn is one SNI connection from accept to close.
type conn struct {
	srv    *Server
	id     uint64
	client *net.TCPConn // the accepted socket: relayed as it is once the hello is read
	remote net.Addr     // the client: a trusted PROXY header's address, else the socket's
	start  time.Time

	hello   Hello
	broker  brokers.Broker
	match   brokers.SNIMatch
	relay   *relay // nil until relaying
	drained atomic.Bool
	// helloBytes went to the broker before the relay: the ClientHello and what came with it.
	helloBytes uint64

	mu       sync.Mutex
	relaying bool
	closed   Reason // why it was closed from outside its goroutines; "" until then
	upstream *net.TCPConn
	waiters  []*idlewait.Waiter // parked sockets' places on the poller, woken on close
	cleanups []func()
}

func newConn(s *Server, c *net.TCPConn, id uint64) *conn {
	return &conn{srv: s, id: id, client: c, remote: c.RemoteAddr(), start: time.Now()}
}

// atEnd registers f to run when the connection ends (last registered, first run).
func (c *conn) atEnd(f func()) { c.cleanups = append(c.cleanups, f) }

// run is the connection's first goroutine: the handshake (PROXY header, limits, ClientHello,
// the decision, the dial), then the relay's start.
func (c *conn) run() {
	c.srv.m.active.WithLabelValues("handshake").Inc()
	broker, reason := c.open()
	if reason != "" {
		c.srv.m.active.WithLabelValues("handshake").Dec()
		c.srv.m.refused.WithLabelValues(string(reason)).Inc()
		c.end(reason)
		return
	}
	c.srv.m.active.WithLabelValues("handshake").Dec()
	c.srv.m.active.WithLabelValues("relaying").Inc()
	c.srv.m.relayed.WithLabelValues(c.match.String()).Inc()
	c.startRelay(broker)
}

// open prepares the connection up to the relay: the broker's socket with the ClientHello
// already written to it, or the reason it is refused (the client was sent an alert where TLS
// has one for it).
func (c *conn) open() (*net.TCPConn, Reason) {
	cfg := &c.srv.cfg
	deadline := time.Now().Add(cfg.HandshakeTimeout)
	c.setReadDeadline(deadline)
	var src io.Reader = c.client
	if cfg.Proxy.Enabled {
		lc := listener.WrapConn(c.client, listener.Options{Proxy: cfg.Proxy})
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := lc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.log(cfg.Log.Debug()).Err(err).Msg("SNI connection: PROXY header refused")
			return nil, ReasonTransportSetup
		}
		c.remote, src = lc.RemoteAddr(), lc
		c.setReadDeadline(deadline) // the header's reader cleared it
	}
	if reason := c.admit(); reason != "" {
		c.alert(AlertInternalError)
		return nil, reason
	}
	hello, raw, err := ReadHello(src, cfg.MaxHelloBytes)
	c.hello = hello
	if err != nil {
		return nil, c.helloFailure(err)
	}
	c.srv.m.helloSize.Observe(float64(hello.Size))
	b, reason := c.decide()
	if reason != "" {
		return nil, reason
	}
	return c.dial(b, raw)
}

// admit applies the per-IP limits, now that the client's real address is known.
func (c *conn) admit() Reason {
	if !c.srv.rate.Allow(c.remote) {
		return ReasonConnectRate
	}
	release, ok := c.srv.perIP.Acquire(c.remote)
	if !ok {
		return ReasonTooManyFromIP
	}
	c.atEnd(release)
	return ""
}

// helloFailure is the outcome of a ClientHello that could not be read: a TLS client is told
// what was wrong with its hello; anything else is just closed.
func (c *conn) helloFailure(err error) Reason {
	var ne net.Error
	switch {
	case c.drained.Load():
		return ReasonDrainedEarly
	case errors.As(err, &ne) && ne.Timeout():
		return ReasonHandshakeTimeout
	case errors.Is(err, ErrNotTLS):
		return ReasonNotTLS
	case errors.Is(err, ErrMalformed):
		c.alert(AlertDecodeError)
		return ReasonMalformed
	case errors.Is(err, ErrTooLarge):
		c.alert(AlertHandshakeFailure)
		return ReasonTooLarge
	}
	return ReasonClientGone
}

// decide applies the decision point's rule and the target rule to the hello's name.
func (c *conn) decide() (brokers.Broker, Reason) {
	if d := c.srv.cfg.Gate.Opaque(); d.Outcome != edge.Forward {
		c.alert(AlertHandshakeFailure)
		return brokers.Broker{}, ReasonPolicy
	}
	if c.hello.ServerName == "" {
		c.alert(AlertUnrecognizedName)
		return brokers.Broker{}, ReasonNoServerName
	}
	b, match, err := c.srv.cfg.Targets.AllowSNI(c.hello.ServerName)
	c.match = match
	switch {
	case err == nil:
		c.broker = b
		return b, ""
	case errors.Is(err, brokers.ErrNoBroker):
		c.alert(AlertInternalError)
		return b, ReasonNoBroker
	case errors.Is(err, brokers.ErrAmbiguousName):
		c.alert(AlertUnrecognizedName)
		return b, ReasonAmbiguous
	}
	c.log(c.srv.cfg.Log.Debug()).Err(err).Msg("SNI connection refused: not a broker")
	c.alert(AlertUnrecognizedName)
	return b, ReasonNotABroker
}

// dial connects to the broker on the client's behalf and writes the ClientHello (and any
// bytes that came with it) first.
func (c *conn) dial(b brokers.Broker, raw []byte) (*net.TCPConn, Reason) {
	cfg := &c.srv.cfg
	began := time.Now()
	from := &upstream.Origin{Client: c.remote, Proxy: c.client.LocalAddr()}
	bc, err := cfg.Dialer.Dial(c.srv.forced, b.Addr(), from)
	if err != nil {
		c.log(cfg.Log.Debug()).Err(err).Msg("SNI connection: broker unreachable")
		c.alert(AlertInternalError)
		return nil, ReasonBrokerUnreachable
	}
	tc, ok := bc.(*net.TCPConn)
	if !ok { // a Dialer with TLS: a configuration the wiring never builds
		bc.Close()
		c.alert(AlertInternalError)
		return nil, ReasonBrokerUnreachable
	}
	c.srv.m.dial.Observe(time.Since(began).Seconds())
	c.mu.Lock()
	c.upstream = tc
	c.mu.Unlock()
	c.atEnd(func() { tc.Close() })
	tc.SetWriteDeadline(time.Now().Add(cfg.HandshakeTimeout))
	_, err = tc.Write(raw)
	tc.SetWriteDeadline(time.Time{})
	if err != nil {
		return nil, ReasonBrokerUnreachable
	}
	c.srv.m.bytes.WithLabelValues(toBroker).Add(float64(len(raw)))
	c.helloBytes = uint64(len(raw))
	return tc, ""
}

// alert sends a fatal TLS alert to a client being refused; failures are moot.
func (c *conn) alert(desc byte) {
	c.client.SetWriteDeadline(time.Now().Add(c.srv.cfg.HandshakeTimeout))
	c.client.Write(alertRecord(desc))
}

// setReadDeadline sets the client's read deadline, except that once draining the deadline
// stays in the past: a later caller must not undo a drain.
func (c *conn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drained.Load() {
		t = drainDeadline
	}
	c.client.SetReadDeadline(t)
}

// drainDeadline is a read deadline long past.
var drainDeadline = time.Unix(1, 0)

// drain stops reading the client: a connection still in its handshake fails its read; a
// relay's client direction ends (see relay.firstEnd) and what the broker is still sending
// gets through before both close.
func (c *conn) drain() {
	c.drained.Store(true)
	c.mu.Lock()
	c.client.SetReadDeadline(drainDeadline)
	waiters := c.waiters
	c.mu.Unlock()
	for _, w := range waiters {
		w.Wake()
	}
}

// close ends the connection from any goroutine: both sockets are closed (and their parked
// waits woken), so its goroutines see their reads and writes fail and unwind.
func (c *conn) close(r Reason) {
	c.mu.Lock()
	if c.closed == "" {
		c.closed = r
	}
	up, waiters := c.upstream, c.waiters
	c.mu.Unlock()
	c.client.Close()
	if up != nil {
		up.Close()
	}
	for _, w := range waiters {
		w.Wake()
	}
}

// parker makes a place on the server's poller for sock, so that its idle pipe holds no
// goroutine; nil where waits keep their goroutine.
func (c *conn) parker(sock *net.TCPConn, resume func()) *idlewait.Waiter {
	if c.srv.idle == nil {
		return nil
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return nil
	}
	w := c.srv.idle.NewWaiter(rc, resume)
	c.mu.Lock()
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	return w
}

// end closes the connection down: what atEnd registered, last first, then the client's
// socket, the metrics and the summary line.
func (c *conn) end(reason Reason) {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
	c.client.Close()
	c.mu.Lock()
	if c.closed != "" {
		reason = c.closed // the cause; what the goroutine saw (a failed read) is its effect
	}
	c.mu.Unlock()
	if c.relay != nil {
		c.srv.m.active.WithLabelValues("relaying").Dec()
		c.srv.m.closes.WithLabelValues(string(reason)).Inc()
	}
	c.summary(reason)
	c.srv.forget(c)
}

// log adds the connection's fields to an event of the plane's logger.
func (c *conn) log(e *zerolog.Event) *zerolog.Event {
	if e == nil {
		return nil
	}
	e = e.Uint64("conn", c.id).Str("remote", c.remote.String())
	if c.hello.ServerName != "" {
		e = e.Str("server_name", c.hello.ServerName)
	}
	if c.broker.Host != "" {
		e = e.Str("broker", c.broker.Addr())
	}
	return e
}

// summary is the one line per ended connection, at log.sessionSummary's level.
func (c *conn) summary(reason Reason) {
	lvl := c.srv.cfg.SummaryLevel
	if lvl == zerolog.Disabled {
		return
	}
	var in, out uint64
	if c.relay != nil {
		in, out = c.relay.up.Bytes(), c.relay.down.Bytes()
	}
	ev := c.log(c.srv.cfg.Log.WithLevel(lvl)).Str("mode", "sni").Str("match", c.matchLabel()).
		Bool("tls13", c.hello.TLS13).Bool("ech", c.hello.ECH).
		Uint64("bytes_in", c.helloBytes+in).Uint64("bytes_out", out).Str("reason", string(reason))
	jsonlog.Seconds(ev, "duration", time.Since(c.start)).Msg("sni connection ended")
}

func (c *conn) matchLabel() string {
	if c.broker.Host == "" {
		return ""
	}
	return c.match.String()
}

// isTimeout reports a deadline's error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.ETIMEDOUT)
}
