package session

import (
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
)

// lookupMode sets up serving a client that connected without proxy_to_broker_url: the
// proxy is its broker for discovery requests, answering from the pooled broker connections.
func (s *session) lookupMode(connect *pb.CommandConnect) (sessionMode, CloseReason) {
	cfg := s.srv.cfg
	s.enter(modeLookup)
	connected := frame.Connected(cfg.ServerVersion, s.negotiatedVersion(connect), cfg.MaxMessageSize)
	if s.offersTopicWatchers() {
		// Pattern consumers then watch a namespace's topics instead of polling for them.
		connected.Connected.FeatureFlags = &pb.FeatureFlags{SupportsTopicWatchers: proto.Bool(true)}
	}
	if err := s.client.writeCommand(connected, cfg.HandshakeTimeout); err != nil {
		return nil, ReasonIOError
	}
	l := &lookupSession{s: s, slots: make(chan struct{}, cfg.MaxPendingLookups)}
	stopRefresh := func() {}
	if s.srv.sec.Authenticator != nil { // without authentication there is nothing to renew
		l.ref = s.newRefresher(s.reply)
		stopRefresh = l.ref.start(s.ctx, connect.GetFeatureFlags().GetSupportsAuthRefresh(), s.expireCredentials)
	}
	s.atEnd(func() {
		s.cancel() // abandons broker round trips of a client that is gone
		stopRefresh()
		l.stopKeepAlive()
		if l.watchers != nil {
			l.watchers.end()
		}
		l.inFlight.Wait()
	})
	s.client.releaseIdle() // the CONNECT's buffer
	return l, ""
}

// lookupSession is a lookup-mode session's state: its answers in flight and the refresher.
type lookupSession struct {
	s                   *session
	ref                 *refresher
	slots               chan struct{}   // one per lookup in flight, at most MaxPendingLookups
	pinged              bool            // a keep-alive PING is unanswered
	inFlight, answering sync.WaitGroup  // the background goroutines and answers; answers alone
	watchers            *lookupWatchers // topic-list watchers, made by the first one opened
	idle                *idlewait.Waiter
	keepAlive           *time.Timer // wakes the parked client when its read deadline is due
	routed              *routed     // set when the client sent a broker's command: it reads the client from then on
}

func (l *lookupSession) background(f func()) {
	l.inFlight.Add(1)
	go func() { defer l.inFlight.Done(); f() }()
}

// serve reads the client's commands until it goes away, keeping an idle client alive: it is
// pinged after one keep-alive interval and dropped after a second one. Each wait parks the
// client's socket (idle.go), so an idle lookup session holds no goroutine; the work a burst
// of commands brings is done by a fresh goroutine (resume), which parks again and ends.
// Without a poller each wait is a fresh goroutine on the runtime's smallest stack.
func (l *lookupSession) serve() CloseReason {
	l.idle = l.s.parker(l.s.client, l.resume)
	l.await()
	return ""
}

// totals: a lookup connection forwards nothing.
func (l *lookupSession) totals() totals { return totals{} }

// await sets up one wait for the client and the commands it brings (see serve).
func (l *lookupSession) await() {
	s, interval := l.s, l.s.srv.cfg.KeepAliveInterval
	s.setReadDeadline(time.Now().Add(interval))
	if l.idle == nil || s.draining() || s.client.hasBuffered() { // nothing to park for
		go l.resume()
		return
	}
	if l.keepAlive == nil {
		l.keepAlive = time.AfterFunc(interval, l.idle.Wake)
	} else {
		l.keepAlive.Reset(interval)
	}
	l.idle.Park()
}

// resume handles what the wait brought: input, the keep-alive deadline, a close or a drain.
func (l *lookupSession) resume() {
	s := l.s
	reason := l.step(s.client.awaitInput())
	if l.routed != nil {
		l.routed.start(reason) // the lookup session's loop ends here; the routed one winds down
		return
	}
	if reason != "" {
		s.end(reason)
		return
	}
	l.await()
}

// stopKeepAlive lets the keep-alive timer go with the session.
func (l *lookupSession) stopKeepAlive() {
	if l.keepAlive != nil {
		l.keepAlive.Stop()
	}
}

// step reads and handles one command once input has arrived (err nil), or acts on why none
// did; a reason ends the session.
func (l *lookupSession) step(err error) CloseReason {
	s := l.s
	var cmd *pb.BaseCommand
	if err == nil {
		cmd, err = s.client.readCommand()
	}
	switch {
	case err == nil:
		l.pinged = false
		reason := l.handle(cmd)
		s.client.releaseIdle()
		return reason
	case isTimeout(err) && s.draining():
		// Nothing more is read; the answers in flight still go out.
		l.answering.Wait() // bounded by broker.lookupTimeout
		return ReasonDrained
	case isTimeout(err) && !l.pinged && s.ctx.Err() == nil:
		l.pinged = true
		if s.reply(frame.Ping()) != nil {
			return ReasonIOError // the reason is the one reply gave (see session.end)
		}
		return ""
	default:
		return s.readFailure(err)
	}
}

// handle serves one command as the edge decides; a reason ends the session.
func (l *lookupSession) handle(cmd *pb.BaseCommand) CloseReason {
	s := l.s
	if l.routed == nil && s.routes(cmd.GetType()) {
		// A client that uses the proxy as its broker (it looked its topic up over HTTP).
		l.routed = s.routedMode(l)
		return l.routed.handle(cmd)
	}
	d := s.srv.sec.Edge.Decoded(s.identityNow(), edge.Lookup, cmd)
	switch d.Outcome {
	case edge.Refuse, edge.Close:
		l.refused(cmd.GetType(), d)
		return ""
	case edge.Answer:
		if d.Renewal {
			l.ref.offer(d.Command.GetAuthResponse()) // unasked-for answers are dropped: there is no broker here
		}
		if d.Reply != nil && s.reply(d.Reply) != nil {
			return ReasonIOError // the reason is the one reply gave (see session.end)
		}
		return ""
	}
	switch req := d.Command; req.GetType() {
	case pb.BaseCommand_WATCH_TOPIC_LIST:
		if !s.watchesTopics() {
			l.refuse(req)
		} else {
			l.watchTopics(req)
		}
	case pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
		if l.watchers == nil {
			l.refuse(req)
		} else {
			l.watchers.close(req)
		}
	default:
		l.lookup(req)
	}
	return ""
}

// refuse answers a command this lookup connection does not serve.
func (l *lookupSession) refuse(cmd *pb.BaseCommand) {
	id, _ := frame.RequestID(cmd)
	l.s.reply(frame.Error(id, pb.ServerError_NotAllowedError,
		"pulsar-proxy: "+cmd.GetType().String()+" is not served on this lookup connection"))
}

// refused answers what the edge refused, counting a discovery request in the lookups metric.
func (l *lookupSession) refused(t pb.BaseCommand_Type, d edge.Decision) {
	s := l.s
	if slices.Contains(lookupTypes, t.String()) {
		result := "rejected"
		if d.Reason == edge.ReasonDenied {
			result = "denied"
		}
		s.srv.metrics.lookups.WithLabelValues(t.String(), result).Inc()
	}
	s.countRefusal(d)
	s.reply(d.Reply)
}

// lookup checks a discovery request against the policy and answers it in the background,
// within the connection's bound on lookups in flight.
func (l *lookupSession) lookup(cmd *pb.BaseCommand) {
	s := l.s
	if !l.admit(cmd) {
		return
	}
	l.answering.Add(1)
	l.background(func() {
		defer func() { <-l.slots; l.answering.Done() }()
		s.answer(cmd, s.srv.giveLookup)
	})
}

// watchTopics opens a topic-list watcher on a broker for the client, admitted as a lookup
// (the slot is held until the broker answered).
func (l *lookupSession) watchTopics(cmd *pb.BaseCommand) {
	if !l.admit(cmd) {
		return
	}
	if l.watchers == nil {
		l.watchers = newLookupWatchers(l)
	}
	l.answering.Add(1)
	l.background(func() {
		defer l.answering.Done()
		l.watchers.start(cmd, func() { <-l.slots; l.s.srv.giveLookup() })
	})
}

// admit applies the lookup bounds to a request the edge let through: the connection's
// lookups in flight and the proxy's; false: it was answered with TooManyRequests.
func (l *lookupSession) admit(cmd *pb.BaseCommand) bool {
	s := l.s
	select {
	case l.slots <- struct{}{}:
	default:
		l.tooMany(cmd, "", "pulsar-proxy: too many lookups in flight on this connection")
		return false
	}
	if !s.srv.takeLookup() {
		<-l.slots
		l.tooMany(cmd, limitLookupsInFlight, "pulsar-proxy: the proxy has too many lookups in flight, retry later")
		return false
	}
	return true
}

// tooMany answers TooManyRequests, which clients retry after a while; limit names the
// limit for its metric ("" for the connection's own bound).
func (l *lookupSession) tooMany(cmd *pb.BaseCommand, limit, msg string) {
	s := l.s
	s.srv.metrics.lookups.WithLabelValues(cmd.GetType().String(), "rejected").Inc()
	if limit != "" {
		s.srv.metrics.limited.WithLabelValues(limit).Inc()
	}
	s.reply(edge.FailureFor(cmd, pb.ServerError_TooManyRequests, msg))
}

// answer resolves one request and writes the answer under the client's request id; resolved
// is called as soon as the broker answered (before the client is written to, which a slow
// client could hold up).
func (s *session) answer(cmd *pb.BaseCommand, resolved func()) {
	t := cmd.GetType().String()
	clientID, _ := frame.RequestID(cmd)
	began := time.Now()
	// Lookups go out as the client's principal and are coalesced only with the same
	// principal's.
	resp, err := s.srv.resolver.Resolve(s.ctx, s.brokerClient(), cmd)
	resolved()
	s.srv.metrics.lookupSeconds.WithLabelValues(t).Observe(time.Since(began).Seconds())
	if err != nil {
		s.srv.metrics.lookups.WithLabelValues(t, "error").Inc()
		code, msg := pb.ServerError_ServiceNotReady, "pulsar-proxy: "+err.Error()
		var le *lookup.Error
		if errors.As(err, &le) {
			code = le.Code
		}
		s.writeFailure(cmd, code, msg)
		return
	}
	s.srv.metrics.lookups.WithLabelValues(t, resultOf(resp)).Inc()
	frame.SetRequestID(resp, clientID)
	if resp.GetType() == pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE && s.srv.sec.Edge.Policed() {
		s.srv.sec.Edge.TopicLists(s.identityNow).Filter(resp)
	}
	if lr := resp.GetLookupTopicResponse(); lr != nil && lr.GetResponse() == pb.CommandLookupTopicResponse_Connect {
		// The client must come back through us, naming this broker as its target (both
		// URLs name the endpoint the proxy dials, whichever the client takes).
		lr.ProxyThroughServiceUrl = proto.Bool(true)
	}
	s.reply(resp)
}

// writeFailure answers a request with the failure form its command expects.
func (s *session) writeFailure(cmd *pb.BaseCommand, code pb.ServerError, msg string) {
	s.reply(edge.FailureFor(cmd, code, msg))
}

// reply writes to a lookup-mode client. A client that takes nothing for a keep-alive interval
// is not reading: its session ends (client_not_reading) instead of going on taking requests
// whose answers pile up behind it, each holding a goroutine and a place among the lookups in
// flight. Any other failed write ends it too: a frame may have been cut short.
func (s *session) reply(cmd *pb.BaseCommand) error {
	err := s.client.writeCommand(cmd, s.srv.cfg.KeepAliveInterval)
	if err != nil {
		if errors.Is(err, mux.ErrQueueFull) { // a routed session's queue
			abortive(s.client.conn)
			s.close(ReasonSlowConsumer)
		} else if isTimeout(err) {
			s.close(ReasonClientNotReading)
		} else {
			s.close(ReasonIOError)
		}
	}
	return err
}

// resultOf labels a broker's answer for the lookups metric.
func resultOf(resp *pb.BaseCommand) string {
	switch {
	case resp.GetType() == pb.BaseCommand_ERROR:
		return "failed"
	case resp.GetLookupTopicResponse().GetResponse() == pb.CommandLookupTopicResponse_Failed:
		return "failed"
	case resp.GetPartitionMetadataResponse().GetResponse() == pb.CommandPartitionedTopicMetadataResponse_Failed:
		return "failed"
	}
	return "ok"
}
