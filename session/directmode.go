package session

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/forward"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// directMode sets up serving a client whose CONNECT names its broker: check the target,
// connect to it on the client's behalf, then forward frames both ways untouched.
func (s *session) directMode(connect *pb.CommandConnect) (sessionMode, CloseReason) {
	target := connect.GetProxyToBrokerUrl()
	b, err := s.srv.targets.Allow(target)
	if err != nil {
		// Never dialled: an open relay is how proxies get abused.
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: "+err.Error())
		return nil, ReasonTargetNotAllowed
	}
	s.broker = b.Addr() // in every later line, and the summary
	if s.srv.cfg.Multiplex != nil {
		return s.multiplexMode(connect, b.Addr())
	}

	if d := s.srv.cfg.Descriptors; d != nil {
		// The broker connection's descriptor, taken before it is dialled.
		release, ok := d.Acquire(1)
		if !ok {
			s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: the proxy has no descriptor left for a broker connection, retry later")
			return nil, ReasonDescriptors
		}
		s.atEnd(release)
	}
	began := time.Now()
	bc, reason := s.openBroker(b.Addr(), connect)
	if bc == nil {
		return nil, reason
	}
	conn := bc.Conn // not bc: its Reader (and the buffer that read CONNECTED) is let go
	s.atEnd(func() { conn.Close() })
	s.srv.metrics.brokerDialSeconds.Observe(time.Since(began).Seconds())
	connected := &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: bc.Connected}
	if err := s.client.writeCommand(connected, s.srv.cfg.HandshakeTimeout); err != nil {
		return nil, ReasonIOError
	}
	s.enter(modeDirect)
	s.srv.metrics.brokerSessions.WithLabelValues(b.Addr()).Inc()
	return s.forward(&wire{conn: bc.Conn, r: bc.Reader}, connect.GetFeatureFlags().GetSupportsAuthRefresh())
}

// openBroker connects to the broker on the client's behalf (see upstream.Connector). When it
// cannot, the client has been told why: the broker's own refusal, relayed, or ServiceNotReady
// (the client retries with a fresh lookup).
func (s *session) openBroker(addr string, c *pb.CommandConnect) (*upstream.Conn, CloseReason) {
	from := &upstream.Origin{Client: s.conn.RemoteAddr(), Proxy: s.conn.LocalAddr()} // s.conn: a PROXY header's address
	hello := &upstream.Hello{ClientVersion: c.GetClientVersion(), ProtocolVersion: c.GetProtocolVersion(), FeatureFlags: c.FeatureFlags}
	// The server's context, not the session's: while the session dials, only a forced
	// shutdown cancels either, and a context derived from the session's would cost every
	// direct session the map and channel that link the two, for its whole life.
	bc, err := s.srv.cfg.Upstream.Open(s.srv.forced, addr, from, hello, s.brokerClient())
	var dialErr *upstream.DialError
	var refused *upstream.BrokerError
	switch {
	case err == nil:
		return bc, ""
	case errors.As(err, &refused):
		s.sendError(0, refused.Code, refused.Message)
		return nil, ReasonBrokerRefused
	case errors.As(err, &dialErr):
		msg, reason := s.dialFailure(err)
		s.sendError(0, pb.ServerError_ServiceNotReady, msg)
		return nil, reason
	default:
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: broker did not complete CONNECT: "+err.Error())
	}
	return nil, ReasonBrokerUnreachable
}

// dialFailure is what the client is told, and why its connection ends, when the proxy could
// not dial its broker. One case has a reason of its own: every local port towards that
// broker address is taken (EADDRNOTAVAIL), which is the proxy host's limit, not the broker's
// fault; the remedy is on the proxy's side (docs/operations.md, Limits).
func (s *session) dialFailure(err error) (string, CloseReason) {
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		return "pulsar-proxy: no local port left towards the broker (EADDRNOTAVAIL: most often the proxy host's ephemeral port range to it is used up; retry later): " + err.Error(), ReasonBrokerPorts
	}
	if upstream.CertificateRefused(err) {
		s.with(s.srv.log.Warn()).Err(err).Msg("broker certificate refused; check broker.tls and the broker's certificate")
	}
	return "pulsar-proxy: cannot reach broker: " + err.Error(), ReasonBrokerUnreachable
}

// forward sets up one pipe per direction, each run by a goroutine of its own (runDown here,
// runUp from serve): an idle direct session is two goroutines on the smallest stacks, and
// none once both directions have parked.
func (s *session) forward(broker *wire, supportsRefresh bool) (sessionMode, CloseReason) {
	m, maxFrame := s.srv.metrics, s.srv.cfg.MaxFrameSize
	toBrokerSink, toClientSink := forward.NewSink(broker.conn, broker.close), forward.NewSink(s.client.conn, s.client.close)
	d := &directSession{s: s, broker: broker, downDone: make(chan struct{})}
	up := forward.Config{Src: s.client.conn, ReadAhead: s.client.takeReadAhead(), Dst: toBrokerSink,
		Limits: frame.ClientLimits(maxFrame), Frames: m.frames.WithLabelValues(toBroker), Bytes: m.bytes.WithLabelValues(toBroker),
		Buffers: s.srv.buffers, SpliceAbove: s.srv.spliceAbove, Idle: s.idleFor(s.client, true, d.resumeUp)}
	down := forward.Config{Src: broker.conn, ReadAhead: broker.takeReadAhead(), Dst: toClientSink,
		Limits: frame.Limits{MaxFrame: maxFrame}, Frames: m.frames.WithLabelValues(toClient), Bytes: m.bytes.WithLabelValues(toClient),
		Buffers: s.srv.buffers, SpliceAbove: s.srv.spliceAbove, Idle: s.idleFor(broker, false, d.resumeDown)}
	if s.srv.cfg.StallTimeout > 0 {
		st := &stalls{sess: s, broker: broker}
		up.Partial, down.Partial = &st.clientPartial, &st.brokerPartial
		toClientSink.WatchWrites(&st.clientNotRead)
		toBrokerSink.WatchWrites(&st.brokerNotRead)
		s.srv.watch(st)
	}
	ref, stopRefresh := s.startRefresher(toClientSink, broker, supportsRefresh)
	s.atEnd(stopRefresh)
	if lists := s.setFilters(&up, &down, toBrokerSink, toClientSink, ref); lists != nil {
		s.atEnd(lists.Close)
	}
	d.up, d.down = forward.New(up), forward.New(down)
	go d.runDown()
	return d, ""
}

// directSession is a forwarding session's two directions; the first to end decides how the
// session ends (firstEnd).
type directSession struct {
	s        *session
	broker   *wire
	up, down *forward.Pipe
	downDone chan struct{} // closed when the broker's direction has ended

	first  sync.Once
	reason CloseReason
	stuck  *time.Timer // closes both ends of a session whose client never finishes a half-close
}

func (d *directSession) runDown()    { d.downEnded(d.down.Run()) }
func (d *directSession) resumeDown() { d.downEnded(d.down.Resume()) }

// downEnded acts on the broker's direction's run unless it only parked.
func (d *directSession) downEnded(err error) {
	if err == forward.ErrParked {
		return
	}
	defer close(d.downDone)
	d.end(pipeResult{false, err})
}

// serve hands the client's direction on to a goroutine of its own, which ends the session:
// the handshake's goroutine has a grown stack, a fresh one parks on the smallest (see
// session.run).
func (d *directSession) serve() CloseReason {
	go d.runUp()
	return ""
}

func (d *directSession) runUp()    { d.upEnded(d.up.Run()) }
func (d *directSession) resumeUp() { d.upEnded(d.up.Resume()) }

// upEnded ends the session once the client's direction has ended (not parked).
func (d *directSession) upEnded(err error) {
	if err == forward.ErrParked {
		return
	}
	d.end(pipeResult{true, err})
	d.s.end(d.finish())
}

func (d *directSession) end(r pipeResult) {
	d.first.Do(func() {
		d.reason = d.s.firstEnd(r, d.broker, d.down)
		if !r.up {
			// After a half-close the client normally finishes at once; do not wait forever
			// on one that never closes.
			d.stuck = time.AfterFunc(d.s.srv.cfg.KeepAliveInterval, func() { d.s.closeBoth(d.broker) })
		}
	})
}

// finish waits for the broker's direction once the client's has ended.
func (d *directSession) finish() CloseReason {
	s := d.s
	select {
	case <-d.downDone:
	case <-time.After(s.srv.cfg.KeepAliveInterval): // the broker's side, likewise
		s.closeBoth(d.broker)
		<-d.downDone
	case <-s.ctx.Done():
		s.closeBoth(d.broker)
		<-d.downDone
	}
	if d.stuck != nil {
		d.stuck.Stop()
	}
	return d.reason
}

func (d *directSession) totals() totals {
	return totals{bytesIn: d.up.Bytes(), framesIn: d.up.Frames(), bytesOut: d.down.Bytes(), framesOut: d.down.Frames()}
}

// pipeResult is how one direction of a direct session ended.
type pipeResult struct {
	up  bool // the client's direction
	err error
}

// firstEnd acts on the first direction to end: a clean end is passed on as a half-close, so
// answers already on their way still arrive; a drain lets the broker's side settle; any
// other failure closes both sockets at once.
func (s *session) firstEnd(first pipeResult, broker *wire, down *forward.Pipe) CloseReason {
	switch {
	case first.up && s.draining() && isTimeout(first.err):
		// Nothing more goes to the broker; what it is still sending (receipts of what it
		// got) reaches the client before both ends close.
		settle(down.Bytes)
		s.closeBoth(broker)
		return ReasonDrained
	case first.up && errors.Is(first.err, io.EOF):
		closeWrite(broker.conn)
		return ReasonClientClosed
	case !first.up && errors.Is(first.err, io.EOF):
		closeWrite(s.client.conn)
		return ReasonBrokerClosed
	}
	reason := s.pipeFailure(first.up, first.err)
	s.closeBoth(broker)
	return reason
}

func (s *session) closeBoth(broker *wire) {
	s.client.close()
	broker.close()
}

// startRefresher renews expiring client credentials (see refresher) while the session
// forwards; its challenge goes into the client's stream. Without authentication there is
// nothing to renew.
func (s *session) startRefresher(toClient *forward.Sink, broker *wire, supportsRefresh bool) (*refresher, func()) {
	if s.srv.sec.Authenticator == nil {
		return nil, func() {}
	}
	ref := s.newRefresher(toClient.Inject)
	stop := ref.start(s.ctx, supportsRefresh, func() {
		s.expireCredentials()
		broker.close()
	})
	return ref, stop
}

// setFilters decides how each direction is forwarded: inspected (authentication or
// authorization on: the client rules upstream, topic lists filtered downstream), or, with
// nothing to inspect, unframed where passthrough is on.
func (s *session) setFilters(up, down *forward.Config, toBroker, toClient *forward.Sink, ref *refresher) (lists *edge.TopicLists) {
	sec := s.srv.sec
	switch {
	case sec.InspectsFrames():
		if sec.Edge.Policed() {
			lists = s.topicLists()
			down.Filter, down.Watch = s.downstreamFilter(toClient, lists), edge.Carries
		}
		up.Filter, up.Watch = s.upstreamFilter(toBroker, toClient, ref, lists), edge.Inspected
		if sec.Edge.Policed() {
			up.Pace = s.pacePublishing // a role's publish rate (policy limits)
		}
	case s.srv.cfg.Passthrough:
		// Nothing reads or injects frames: both directions may go socket to socket untouched.
		up.Unframed, down.Unframed = true, true
	}
	return lists
}

// Draining sessions wait for the broker's side to settle: until it has sent nothing for
// settleQuiet, at most settleMax. Answers to requests already forwarded come within a broker
// round trip (milliseconds); a consumer's stream would never go quiet. An answer that misses
// the window is not a loss: the client sends the request again after it reconnects.
const (
	settleQuiet = 500 * time.Millisecond
	settleMax   = 3 * time.Second
)

// settle returns once moved (a count of bytes sent) has not moved for settleQuiet, or after
// settleMax.
func settle(moved func() uint64) {
	deadline := time.Now().Add(settleMax)
	last, quietSince := moved(), time.Now()
	for time.Now().Before(deadline) && time.Since(quietSince) < settleQuiet {
		time.Sleep(settleQuiet / 8)
		if n := moved(); n != last {
			last, quietSince = n, time.Now()
		}
	}
}

func (s *session) pipeFailure(fromClient bool, err error) CloseReason {
	if errors.Is(err, forward.ErrRefused) {
		return ReasonCommandRefused
	}
	if frame.IsFrameError(err) {
		// No error frame here: the other pipe may be mid-frame on the same socket.
		s.with(s.srv.log.Debug()).Bool("from_client", fromClient).Err(err).Msg("bad frame in direct session")
		return ReasonBadFrame
	}
	if s.ctx.Err() != nil {
		return ReasonShutdown
	}
	return ReasonIOError
}

// closeWrite half-closes c where the transport supports it, so the far side sees EOF
// while its answers can still flow back.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
