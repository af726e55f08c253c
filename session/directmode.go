package session

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
)

// directMode serves a client whose CONNECT names its broker: check the target, connect to
// it on the client's behalf, then forward frames both ways untouched.
func (s *session) directMode(connect *pb.CommandConnect) CloseReason {
	cfg := s.srv.cfg
	target := connect.GetProxyToBrokerUrl()
	b, err := s.srv.targets.Allow(target)
	if err != nil {
		// Never dialled: an open relay is how proxies get abused.
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: "+err.Error())
		return ReasonTargetNotAllowed
	}
	s.log = s.log.With().Str("broker", b.Addr()).Logger() // in every later line, and the summary

	began := time.Now()
	from := &lookup.Origin{Client: s.conn.RemoteAddr(), Proxy: s.conn.LocalAddr()} // s.conn: a PROXY header's address
	bc, err := cfg.Dialer.Dial(s.ctx, b.Addr(), from)
	if err != nil {
		if lookup.CertificateRefused(err) {
			s.log.Warn().Err(err).Msg("broker certificate refused; check broker.tls and the broker's certificate")
		}
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: cannot reach broker: "+err.Error())
		return ReasonBrokerUnreachable
	}
	defer bc.Close()
	broker := newWire(bc, frame.Limits{MaxFrame: cfg.MaxFrameSize})

	resp, reason := s.connectBroker(broker, connect)
	if resp == nil {
		return reason
	}
	s.srv.metrics.brokerDialSeconds.Observe(time.Since(began).Seconds())
	if err := s.client.writeCommand(resp, cfg.HandshakeTimeout); err != nil {
		return ReasonIOError
	}
	if resp.GetType() != pb.BaseCommand_CONNECTED {
		return ReasonBrokerRefused
	}
	s.setMode("direct")
	s.srv.metrics.brokerSessions.WithLabelValues(b.Addr()).Inc()
	return s.forward(broker, connect.GetFeatureFlags().GetSupportsAuthRefresh())
}

// connectBroker sends the broker a CONNECT on the client's behalf and returns its answer
// (CONNECTED, or the broker's ERROR to relay). A nil answer means the session is over.
func (s *session) connectBroker(broker *wire, c *pb.CommandConnect) (*pb.BaseCommand, CloseReason) {
	cfg := s.srv.cfg
	req := &pb.CommandConnect{
		ClientVersion:   c.ClientVersion,
		ProtocolVersion: c.ProtocolVersion,
		FeatureFlags:    c.FeatureFlags,
		ProxyVersion:    proto.String(cfg.ServerVersion),
	}
	sec := s.srv.sec
	if sec.ProxyCredentials != nil {
		method, data, err := sec.ProxyCredentials()
		if err != nil {
			s.log.Error().Err(err).Msg("proxy credentials for broker")
			s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: the proxy has no credentials for the broker")
			return nil, ReasonBrokerUnreachable
		}
		req.AuthMethodName, req.AuthData = proto.String(method), data
	}
	s.mu.Lock()
	switch {
	case s.identity.Role != "":
		req.OriginalPrincipal = proto.String(s.identity.Role)
	case sec.DefaultPrincipal != "" && sec.ProxyCredentials != nil: // only a proxy role needs one
		req.OriginalPrincipal = proto.String(sec.DefaultPrincipal)
	}
	if sec.ForwardClientCredentials && s.clientCreds.Method != "" {
		req.OriginalAuthMethod = proto.String(s.clientCreds.Method)
		req.OriginalAuthData = proto.String(string(s.clientCreds.Data))
	}
	s.mu.Unlock()
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: req}
	deadline := time.Now().Add(cfg.ConnectTimeout)
	broker.conn.SetDeadline(deadline)
	defer broker.conn.SetDeadline(time.Time{})
	if err := broker.writeCommand(cmd, cfg.ConnectTimeout); err != nil {
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: broker connection failed: "+err.Error())
		return nil, ReasonBrokerUnreachable
	}
	resp, err := broker.readCommand()
	if err != nil {
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: broker did not complete CONNECT: "+err.Error())
		return nil, ReasonBrokerUnreachable
	}
	switch resp.GetType() {
	case pb.BaseCommand_CONNECTED, pb.BaseCommand_ERROR:
		return resp, ""
	default:
		s.sendError(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: broker answered CONNECT with "+resp.GetType().String())
		return nil, ReasonBrokerRefused
	}
}

// forward runs one pipe per direction until both ends are done. A clean end on one side is
// passed on as a half-close, so answers already on their way still arrive; any other
// failure closes both sockets at once.
func (s *session) forward(broker *wire, supportsRefresh bool) CloseReason {
	m := s.srv.metrics
	toBrokerSink, toClientSink := newSink(broker.conn), newSink(s.client.conn)
	up := &pipe{src: s.client, dst: toBrokerSink, limits: frame.ClientLimits(s.srv.cfg.MaxFrameSize), frames: m.frames.WithLabelValues(toBroker), bytes: m.bytes.WithLabelValues(toBroker),
		buffers: s.srv.buffers, spliceAbove: s.srv.spliceAbove}
	down := &pipe{src: broker, dst: toClientSink, limits: frame.Limits{MaxFrame: s.srv.cfg.MaxFrameSize}, frames: m.frames.WithLabelValues(toClient), bytes: m.bytes.WithLabelValues(toClient),
		buffers: s.srv.buffers, spliceAbove: s.srv.spliceAbove}

	ref, stopRefresh := s.startRefresher(toClientSink, broker, supportsRefresh)
	defer stopRefresh()
	s.setFilters(up, down, toBrokerSink, toClientSink, ref)

	type result struct {
		up  bool
		err error
	}
	results := make(chan result, 2)
	go func() { results <- result{true, up.run()} }()
	go func() { results <- result{false, down.run()} }()
	forwarding := make(chan struct{})
	watching := make(chan struct{})
	go func() { s.stopReadingOnDrain(forwarding); close(watching) }()
	defer func() { close(forwarding); <-watching }()

	first := <-results
	var reason CloseReason
	switch {
	case first.up && s.draining() && isTimeout(first.err):
		// Nothing more goes to the broker; what it is still sending (receipts of what it
		// got) reaches the client before both ends close.
		reason = ReasonDrained
		settle(&down.totalBytes)
		s.client.conn.Close()
		broker.conn.Close()
	case first.up && errors.Is(first.err, io.EOF):
		reason = ReasonClientClosed
		closeWrite(broker.conn)
	case !first.up && errors.Is(first.err, io.EOF):
		reason = ReasonBrokerClosed
		closeWrite(s.client.conn)
	default:
		reason = s.pipeFailure(first.up, first.err)
		s.client.conn.Close()
		broker.conn.Close()
	}
	// After a half-close the other side normally finishes at once; do not wait forever on
	// a peer that never closes.
	select {
	case <-results:
	case <-time.After(s.srv.cfg.KeepAliveInterval):
		s.client.conn.Close()
		broker.conn.Close()
		<-results
	case <-s.ctx.Done():
		s.client.conn.Close()
		broker.conn.Close()
		<-results
	}
	s.mu.Lock()
	s.bytesIn, s.framesIn = up.totalBytes.Load(), up.totalFrames
	s.bytesOut, s.framesOut = down.totalBytes.Load(), down.totalFrames
	s.mu.Unlock()
	return reason
}

// startRefresher renews expiring client credentials (see refresher) while the session
// forwards; its challenge goes into the client's stream. Without authentication there is
// nothing to renew.
func (s *session) startRefresher(toClient *sink, broker *wire, supportsRefresh bool) (*refresher, func()) {
	if s.srv.sec.Authenticator == nil {
		return nil, func() {}
	}
	ref := s.newRefresher(toClient.inject)
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ref.run(ctx, supportsRefresh) != nil {
			s.expireCredentials()
			broker.conn.Close()
		}
	}()
	return ref, func() { cancel(); <-done }
}

// setFilters decides how each direction is forwarded: inspected (authentication or
// authorization on: the client rules upstream, topic lists filtered downstream), or, with
// nothing to inspect, unframed where passthrough is on.
func (s *session) setFilters(up, down *pipe, toBroker, toClient *sink, ref *refresher) {
	sec := s.srv.sec
	switch {
	case sec.InspectsFrames():
		var lists *topicLists
		if sec.Policy != nil {
			lists = newTopicLists(s.mayLookUp)
			down.filter, down.watch = s.downstreamFilter(toClient, lists), watchedTopicLists
		}
		up.filter, up.watch = s.upstreamFilter(toBroker, toClient, ref, lists), watchedByFilter
	case s.srv.cfg.Passthrough:
		// Nothing reads or injects frames: both directions may go socket to socket untouched.
		up.unframed, down.unframed = true, true
	}
}

// Draining sessions wait for the broker's side to settle: until it has sent nothing for
// settleQuiet, at most settleMax. Answers to requests already forwarded come within a broker
// round trip (milliseconds); a consumer's stream would never go quiet. An answer that misses
// the window is not a loss: the client sends the request again after it reconnects.
const (
	settleQuiet = 500 * time.Millisecond
	settleMax   = 3 * time.Second
)

// settle returns once the counter has not moved for settleQuiet, or after settleMax.
func settle(moved *atomic.Uint64) {
	deadline := time.Now().Add(settleMax)
	last, quietSince := moved.Load(), time.Now()
	for time.Now().Before(deadline) && time.Since(quietSince) < settleQuiet {
		time.Sleep(settleQuiet / 8)
		if n := moved.Load(); n != last {
			last, quietSince = n, time.Now()
		}
	}
}

func (s *session) pipeFailure(fromClient bool, err error) CloseReason {
	if errors.Is(err, errCommandRefused) {
		return ReasonCommandRefused
	}
	if frame.IsFrameError(err) {
		// No error frame here: the other pipe may be mid-frame on the same socket.
		s.log.Debug().Bool("from_client", fromClient).Err(err).Msg("bad frame in direct session")
		return ReasonBadFrame
	}
	if s.ctx.Err() != nil {
		return ReasonShutdown
	}
	return ReasonIOError
}
