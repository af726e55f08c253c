package session

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
)

// session is one client connection from accept to close: its transport, the handshake, then
// the mode the handshake chose (sessionMode), and its end.
type session struct {
	srv    *Server
	id     uint64
	conn   net.Conn // as accepted; closing it ends the session from any goroutine
	client *wire    // reads and writes the client (through TLS where there is TLS)
	broker string   // direct mode: the broker's address, for the log lines
	start  time.Time

	ctx    context.Context // cancelled when the session ends or the server shuts down
	cancel context.CancelFunc

	mu     sync.Mutex
	mode   mode        // where the session is: a metric label, and the summary's mode
	closed CloseReason // why it was closed from outside its own goroutine (see close); "" until then

	identity    authn.Identity    // who the client is (Role "" without authentication), renewed on refresh
	clientCreds authn.Credentials // what it presented, for forwardClientCredentials
	drained     atomic.Bool       // set when the server starts draining

	served   sessionMode // the mode the handshake chose; nil until then
	cleanups []func()    // undone once the session ends, last first

	releaseFD func() // gives the connection's place in the descriptor budget back; nil: none

	// For the log's refusal summaries: what the client was last told before a close, and why
	// its authentication failed.
	told       string
	authReason authn.Reason
}

func newSession(srv *Server, c net.Conn, id uint64) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		srv:    srv,
		id:     id,
		conn:   c,
		client: newWire(c, frame.ClientLimits(srv.cfg.MaxFrameSize)),
		start:  time.Now(),
		ctx:    ctx,
		cancel: cancel,
		mode:   modeHandshake,
	}
}

// drain asks the session to hand its client over to another proxy: take no new request,
// let the answers already on their way arrive, then close, so the client reconnects (through
// the service address, to a proxy that is not draining) and loses nothing it sent: a
// request the broker never answered is sent again by the client. The client's read fails at
// once (a deadline in the past wakes it), and each mode winds down from that failure; a
// session still in its handshake finishes it and stops reading as its mode begins (enter).
// No goroutine waits for a drain: an idle session costs one goroutine less.
func (s *session) drain() {
	s.drained.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != modeHandshake {
		s.client.conn.SetReadDeadline(drainDeadline)
		s.client.wake() // a parked socket has no read to fail
	}
}

// drainDeadline is a read deadline long past.
var drainDeadline = time.Unix(1, 0)

func (s *session) draining() bool { return s.drained.Load() }

// setReadDeadline sets the client's read deadline, except that once draining has begun the
// deadline stays in the past: a later keep-alive deadline must not undo the drain's.
func (s *session) setReadDeadline(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining() {
		t = drainDeadline
	}
	s.client.conn.SetReadDeadline(t)
}

// run is the session's first goroutine: the transport and the handshake, then the mode's
// start. Every mode hands its loop on to goroutines of its own (serve returns ""), the last
// of which ends the session: a goroutine whose stack grew during the handshake never shrinks
// back to the runtime's 2 KiB minimum, a fresh one that only waits does.
func (s *session) run() {
	s.srv.metrics.activeSessions.WithLabelValues(modeHandshake.String()).Inc()
	m, reason := s.open()
	if m != nil {
		s.mu.Lock()
		s.served = m
		s.mu.Unlock()
		if reason = m.serve(); reason == "" {
			return
		}
	}
	s.end(reason)
}

// end closes the session down once its mode's loop has ended: what atEnd registered, last
// first, then the client's socket, the metrics and the summary line.
func (s *session) end(reason CloseReason) {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cancel()
	s.conn.Close()
	if s.releaseFD != nil {
		s.releaseFD()
	}
	s.mu.Lock()
	if s.closed != "" {
		// Closed from outside: what the session's own goroutine then saw (a read error) is
		// the consequence, not the reason.
		reason = s.closed
	}
	s.mu.Unlock()
	m := s.srv.metrics
	m.activeSessions.WithLabelValues(s.currentMode().String()).Dec()
	if reason.beforeSession() {
		m.handshakeFailures.WithLabelValues(string(reason)).Inc()
	}
	m.closes.WithLabelValues(string(reason)).Inc()
	s.reportRefusal(reason)
	s.summary(reason)
	s.srv.forget(s)
}

// with adds the session's fields to an event of the server's logger (a nil event, when its
// level is off, stays nil). Built per line, not kept: a logger with fields of its own would
// cost every idle session a buffer.
func (s *session) with(e *zerolog.Event) *zerolog.Event {
	if e == nil {
		return nil
	}
	e = e.Uint64("conn", s.id).Str("remote", s.conn.RemoteAddr().String())
	if s.broker != "" {
		e = e.Str("broker", s.broker)
	}
	return e
}

// atEnd registers f to run when the session ends, after its mode's loop.
func (s *session) atEnd(f func()) { s.cleanups = append(s.cleanups, f) }

// open prepares the transport, applies the per-IP limits and makes the session's mode, or
// says why it ends.
//
// The per-IP limits are applied after prepare, because only then is the client's real
// address (a PROXY header's) known; session.maxConnections was applied before (see
// Server.refuse).
func (s *session) open() (sessionMode, CloseReason) {
	if err := s.prepare(); err != nil {
		s.with(s.srv.log.Debug()).Err(err).Msg("TLS handshake or PROXY header failed")
		return nil, ReasonTransportSetup
	}
	if !s.srv.connectRate.Allow(s.conn.RemoteAddr()) {
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: too many new connections from your address, retry later")
		return nil, ReasonConnectRate
	}
	release, ok := s.srv.clientIPs.Acquire(s.conn.RemoteAddr())
	if !ok {
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: too many connections from your address, retry later")
		return nil, ReasonTooManyFromIP
	}
	s.atEnd(release)
	return s.handshake()
}

// mode is where a session is in its life:
//
//	handshake ──▶ lookup ──▶ routed
//	    └───────▶ direct
type mode uint8

const (
	modeHandshake mode = iota
	modeLookup
	modeDirect
	modeRouted // a lookup connection whose client uses the proxy as its broker (routed)
)

// String is the mode as a metric label and log field.
func (m mode) String() string {
	switch m {
	case modeLookup:
		return "lookup"
	case modeDirect:
		return "direct"
	case modeRouted:
		return "routed"
	}
	return "handshake"
}

// enter moves the session from the handshake to a mode, and between the active-session
// gauges.
func (s *session) enter(m mode) {
	s.mu.Lock()
	old := s.mode
	s.mode = m
	if s.draining() {
		s.client.conn.SetReadDeadline(drainDeadline) // drained during the handshake
	}
	s.mu.Unlock()
	s.srv.metrics.activeSessions.WithLabelValues(old.String()).Dec()
	s.srv.metrics.activeSessions.WithLabelValues(m.String()).Inc()
	s.srv.metrics.sessions.WithLabelValues(m.String()).Inc()
}

// close ends the session from any goroutine: the client's socket is closed, so its
// goroutines see their reads and writes fail and unwind. The first reason given is the one
// the session ends with.
func (s *session) close(r CloseReason) {
	s.mu.Lock()
	if s.closed == "" {
		s.closed = r
	}
	moded := s.mode != modeHandshake // s.client is final, and may be parked
	s.mu.Unlock()
	s.conn.Close()
	if moded {
		s.client.wake() // a parked socket has no read to fail
	}
}

// shutdown ends the session from outside (server drain deadline).
func (s *session) shutdown() {
	s.close(ReasonShutdown)
	s.cancel()
}

// transport is a client connection that must finish a handshake of its own (TLS, PROXY
// header) before it carries Pulsar frames; listener.Conn is one.
type transport interface {
	HandshakeContext(ctx context.Context) error
}

// tcpUnwrapper gives the bare socket when nothing remains between it and the session, so
// forwarding keeps its splice path.
type tcpUnwrapper interface {
	TCPConn() (*net.TCPConn, bool)
}

// tlsState reports the TLS state of a client connection.
type tlsState interface {
	TLS() (tls.ConnectionState, bool)
}

// prepare runs the transport's own handshake here, in the session's goroutine and bounded
// by the handshake timeout, so that a slow client cannot hold up Accept. A PROXY header
// changes the client's address that log lines name (s.conn.RemoteAddr).
func (s *session) prepare() error {
	t, ok := s.conn.(transport)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.srv.cfg.HandshakeTimeout)
	defer cancel()
	if err := t.HandshakeContext(ctx); err != nil {
		return err
	}
	c := s.conn
	if u, ok := s.conn.(tcpUnwrapper); ok {
		if tc, ok := u.TCPConn(); ok {
			c = tc
		}
	}
	s.client = newWire(c, frame.ClientLimits(s.srv.cfg.MaxFrameSize))
	return nil
}

// peerCertificates are the client's verified TLS certificates, nil without them.
func (s *session) peerCertificates() []*x509.Certificate {
	ts, ok := s.conn.(tlsState)
	if !ok {
		return nil
	}
	st, ok := ts.TLS()
	if !ok || len(st.VerifiedChains) == 0 {
		return nil
	}
	return st.PeerCertificates
}

// handshake reads the client's CONNECT and makes the mode it asks for, or says why the
// session ends (the client has been told).
func (s *session) handshake() (sessionMode, CloseReason) {
	cfg := s.srv.cfg
	s.client.conn.SetReadDeadline(time.Now().Add(cfg.HandshakeTimeout))
	if s.tlsOnPlaintext() {
		return nil, ReasonTLSOnPlaintext
	}
	cmd, err := s.client.readCommand()
	if err != nil {
		return nil, s.readFailure(err)
	}
	if cmd.GetType() != pb.BaseCommand_CONNECT || cmd.GetConnect() == nil {
		s.sendError(0, pb.ServerError_NotAllowedError, "pulsar-proxy: the first command must be CONNECT, got "+cmd.GetType().String())
		return nil, ReasonExpectedConnect
	}
	connect := cmd.GetConnect()
	if field := forgedProxyField(connect); field != "" {
		s.sendError(0, pb.ServerError_NotAllowedError, "pulsar-proxy: clients may not set "+field+"; only a proxy sets it")
		return nil, ReasonForgedProxyFields
	}
	if !s.authenticate(connect) {
		return nil, ReasonAuthFailed
	}
	release, ok := s.acquireRole()
	if !ok {
		s.srv.metrics.limited.WithLabelValues(limitRoleConnections).Inc()
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: role "+edge.QuoteRole(s.role())+" has as many connections as its limit allows, retry later")
		return nil, ReasonTooManyForRole
	}
	s.atEnd(release)
	s.client.conn.SetReadDeadline(time.Time{})
	if connect.GetProxyToBrokerUrl() == "" {
		return s.lookupMode(connect)
	}
	return s.directMode(connect)
}

// tlsOnPlaintext reports whether a client of a plaintext listener opened with a TLS
// ClientHello (a client configured for TLS pointed at the plaintext port). Nothing is sent
// back: the client would read a Pulsar frame as a broken TLS record, and its own error
// (an EOF during the handshake) is the clearer one. Three bytes decide (frame.IsTLSRecord);
// a client that sends fewer is left to the read that follows.
func (s *session) tlsOnPlaintext() bool {
	if ts, ok := s.conn.(tlsState); ok {
		if _, isTLS := ts.TLS(); isTLS {
			return false
		}
	}
	head, err := s.client.r.Peek(3)
	return err == nil && frame.IsTLSRecord(head)
}

// forgedProxyField names a field that only a proxy may send; a client setting it would be
// impersonating another principal towards the broker.
func forgedProxyField(c *pb.CommandConnect) string {
	switch {
	case c.ProxyVersion != nil:
		return "proxy_version"
	case c.OriginalPrincipal != nil:
		return "original_principal"
	case c.OriginalAuthData != nil:
		return "original_auth_data"
	case c.OriginalAuthMethod != nil:
		return "original_auth_method"
	}
	return ""
}

// readFailure turns a failed read from the client into a close reason, telling the client
// what was wrong where the protocol lets us.
func (s *session) readFailure(err error) CloseReason {
	switch {
	case errors.Is(err, io.EOF):
		return ReasonClientClosed
	case isTimeout(err):
		if s.currentMode() == modeHandshake {
			return ReasonHandshakeTimeout
		}
		return ReasonKeepAliveTimeout
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return ReasonIOError
	case frame.IsFrameError(err):
		s.sendError(0, pb.ServerError_NotAllowedError, "pulsar-proxy: bad frame: "+err.Error())
		return ReasonBadFrame
	default:
		return ReasonIOError
	}
}

// sendError tells the client why before a close; failures to send are moot.
func (s *session) sendError(requestID uint64, code pb.ServerError, msg string) {
	s.with(s.srv.log.Debug()).Stringer("code", code).Str("refusal", msg).Msg("refusing client")
	s.told = msg
	s.client.writeCommand(frame.Error(requestID, code, msg), s.srv.cfg.HandshakeTimeout)
}

// negotiatedVersion is the protocol both sides speak.
func (s *session) negotiatedVersion(c *pb.CommandConnect) int32 {
	return min(c.GetProtocolVersion(), s.srv.cfg.ProtocolVersion)
}

func (s *session) summary(reason CloseReason) {
	lvl := s.srv.cfg.SummaryLevel
	if lvl == zerolog.Disabled {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var t totals
	if s.served != nil {
		t = s.served.totals()
	}
	ev := s.with(s.srv.log.WithLevel(lvl)).
		Str("principal", s.identity.Role).
		Stringer("mode", s.mode).
		Bool("multiplexed", t.multiplexed).
		Uint64("bytes_in", t.bytesIn).Uint64("bytes_out", t.bytesOut).
		Uint64("frames_in", t.framesIn).Uint64("frames_out", t.framesOut).
		Str("reason", string(reason))
	jsonlog.Seconds(ev, "duration", time.Since(s.start)).Msg("session ended")
}

func (s *session) currentMode() mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}
