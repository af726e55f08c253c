package session

import (
	"errors"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// multiplexed is a direct session whose client shares pooled broker connections with other
// clients of the same broker and principal (broker.multiplex): the proxy answers CONNECT
// itself, and every frame goes through the identifier mapping (see package mux).
type multiplexed struct {
	*queuedClient
	key mux.Key

	mu     sync.Mutex
	member *mux.Member // nil after the broker connection was lost, until the next command

	lists *edge.TopicLists // the client's topic-list watchers, bounded; filtered with a policy

	ref     *refresher // renews the client's credentials; nil without authentication
	stopRef func()

	running atomic.Bool // the client's queue is written: the proxy writes through it only
}

// Deliver takes broker frames for the client (the connection's reader: never waits).
// Topic lists are filtered by the policy first, as in a direct session.
func (x *multiplexed) Deliver(fs []mux.Frame) error {
	if !x.s.srv.sec.Edge.Policed() {
		return x.push(fs...)
	}
	return x.pushSorted(fs, carriesList, x.filterList)
}

// carriesList reports whether a broker frame carries a topic list (which a policy filters).
func carriesList(f mux.Frame) bool {
	t, err := f.Type()
	return err == nil && edge.Carries(t)
}

// filterList passes on a topic list with what the client may not look up taken out.
func (x *multiplexed) filterList(f mux.Frame) error {
	cmd, err := frame.Decode(f.Command())
	if err != nil {
		return x.push(f) // the broker's own frame: the client's parser judges it
	}
	f.Release() // what goes on is cmd, filtered
	send, err := x.lists.Filter(cmd)
	if err != nil {
		x.s.with(x.s.srv.log.Debug()).Err(err).Msg("closing session")
		x.inject(frame.Error(0, pb.ServerError_TooManyRequests, "pulsar-proxy: "+err.Error()))
		x.s.close(ReasonCommandRefused)
		return nil
	}
	if !send {
		return nil
	}
	return x.inject(cmd)
}

// Lost closes at the client what it had on a broker connection that failed, as a broker
// does when a topic is unloaded, so the client recreates it (over a new connection);
// requests in flight fail with ServiceNotReady, which clients retry. A topic-list watcher
// has no close a client understands: the client is disconnected and reconnects it all.
func (x *multiplexed) Lost(held mux.Held) {
	x.mu.Lock()
	x.member = nil
	x.mu.Unlock()
	if len(held.Watchers) > 0 {
		x.s.close(ReasonBrokerClosed)
		return
	}
	own := uint64(math.MaxUint64) // the request id a broker's own closes carry
	for id := range held.Producers {
		x.inject(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(id), RequestId: proto.Uint64(own)}})
	}
	for id := range held.Consumers {
		x.inject(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(own)}})
	}
	for _, id := range held.Requests {
		x.inject(frame.Error(id, pb.ServerError_ServiceNotReady, "pulsar-proxy: broker connection lost, retry"))
	}
}

// abortive makes the next close of c a reset: what the kernel still holds for a client
// that does not read is dropped rather than trickled out to it.
func abortive(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}

// multiplexMode sets up a direct session over the pool (see multiplexed): a place on a
// pooled broker connection, CONNECTED, and the writer of the client's queue.
func (s *session) multiplexMode(connect *pb.CommandConnect, addr string) (sessionMode, CloseReason) {
	m := s.srv.metrics
	x := &multiplexed{queuedClient: newQueuedClient(s, s.srv.cfg.Multiplex.ClientQueueBytes()),
		key:   mux.Key{Addr: addr, Principal: s.role()},
		lists: s.topicLists()} // before attaching: the broker's frames may arrive at once
	began := time.Now()
	mb, reason := x.attach()
	if mb == nil {
		return nil, reason
	}
	m.brokerDialSeconds.Observe(time.Since(began).Seconds())
	if err := s.client.writeCommand(reflectConnected(mb.Connected(), connect), s.srv.cfg.HandshakeTimeout); err != nil {
		mb.Leave()
		return nil, ReasonIOError
	}
	s.enter(modeDirect)
	m.brokerSessions.WithLabelValues(addr).Inc()

	x.running.Store(true)
	x.idle = s.parker(s.client, x.resume) // a quiet client holds no goroutine
	x.startWriter()
	x.startRefresher(connect.GetFeatureFlags().GetSupportsAuthRefresh())
	return x, ""
}

// serve hands the client's reading on to a goroutine of its own; the goroutine that reads
// the client's last frame ends the session.
func (x *multiplexed) serve() CloseReason {
	go x.resume()
	return ""
}

// resume reads the client until it goes away (and ends the session) or is parked while
// quiet (the socket's waiter calls resume again, on a fresh goroutine).
func (x *multiplexed) resume() {
	reason, parked := x.readClient(x.handle)
	if !parked {
		x.s.end(x.finish(reason))
	}
}

// finish leaves the pool once the client is gone and lets the queue empty.
func (x *multiplexed) finish(reason CloseReason) CloseReason {
	x.stopRef()
	if reason == ReasonDrained {
		settle(x.bytesOut.Load) // answers already on their way still reach the client
	}
	x.leave() // its producers and consumers closed on the broker at once
	x.lists.Close()
	x.finishWriter()
	return reason
}

// reflectConnected is the CONNECTED the proxy gives a multiplexed client: the broker's (its
// version, features, maximum message size) at the protocol version both speak.
func reflectConnected(b *pb.CommandConnected, c *pb.CommandConnect) *pb.BaseCommand {
	out := proto.Clone(b).(*pb.CommandConnected)
	out.ProtocolVersion = proto.Int32(min(b.GetProtocolVersion(), c.GetProtocolVersion()))
	return &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: out}
}

// attach puts the client on a pooled connection; when that fails the client has been told
// why, as in openBroker (once its queue runs, through the queue).
func (x *multiplexed) attach() (*mux.Member, CloseReason) {
	s := x.s
	mb, err := s.srv.cfg.Multiplex.Attach(s.ctx, x.key, x)
	if err == nil {
		x.mu.Lock()
		x.member = mb
		x.mu.Unlock()
		return mb, ""
	}
	tell := func(code pb.ServerError, msg string) {
		if x.running.Load() {
			x.inject(frame.Error(0, code, msg))
		} else {
			s.sendError(0, code, msg)
		}
	}
	var dialErr *upstream.DialError
	var refused *upstream.BrokerError
	switch {
	case errors.As(err, &refused):
		tell(refused.Code, refused.Message)
		return nil, ReasonBrokerRefused
	case errors.As(err, &dialErr):
		msg, reason := s.dialFailure(err)
		tell(pb.ServerError_ServiceNotReady, msg)
		return nil, reason
	default:
		tell(pb.ServerError_ServiceNotReady, "pulsar-proxy: broker did not complete CONNECT: "+err.Error())
	}
	return nil, ReasonBrokerUnreachable
}

// current is the member to send on, attaching anew after a lost connection.
func (x *multiplexed) current() (*mux.Member, CloseReason) {
	x.mu.Lock()
	mb := x.member
	x.mu.Unlock()
	if mb != nil {
		return mb, ""
	}
	return x.attach()
}

func (x *multiplexed) leave() {
	x.mu.Lock()
	mb := x.member
	x.member = nil
	x.mu.Unlock()
	if mb != nil {
		mb.Leave()
	}
}

// startRefresher renews expiring client credentials as in a direct session; its challenge
// goes into the client's queue.
func (x *multiplexed) startRefresher(supportsRefresh bool) {
	s := x.s
	if s.srv.sec.Authenticator == nil {
		x.stopRef = func() {}
		return
	}
	x.ref = s.newRefresher(x.inject)
	x.stopRef = x.ref.start(s.ctx, supportsRefresh, func() {
		s.expireCredentials()
		s.conn.Close()
	})
}

// handle acts on what the edge decides for one command, and sends it on if it may go.
func (x *multiplexed) handle(fr frame.Frame) CloseReason {
	s := x.s
	t, err := frame.PeekType(fr.Command)
	if err != nil {
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: bad frame: "+err.Error()))
		return ReasonBadFrame
	}
	d := s.srv.sec.Edge.Frame(s.identityNow(), edge.Multiplexed, t, fr.Command, fr.Payload)
	switch d.Outcome {
	case edge.Refuse:
		s.countRefusal(d)
		x.inject(d.Reply)
		return ""
	case edge.Close:
		s.logRefusal(d)
		x.inject(d.Reply)
		return ReasonCommandRefused
	case edge.Answer:
		if d.Renewal && x.ref != nil {
			// The pooled connection's credentials are the proxy's: only the proxy's own
			// challenge is answered here.
			x.ref.offer(d.Command.GetAuthResponse())
		}
		if d.Reply != nil {
			x.inject(d.Reply)
		}
		return ""
	}
	if refusal := x.lists.Track(d.Command); refusal != nil {
		x.inject(refusal)
		return ""
	}
	command := fr.Command
	if d.Rewritten {
		b, err := frame.AppendCommand(nil, d.Command)
		if err != nil {
			return x.refused(fr.Command, err)
		}
		command = b[frame.HeaderSize:]
	}
	return x.send(t, command, fr.Payload)
}

// send puts a command on the shared connection, attaching anew (twice at most) when the
// connection was lost meanwhile. The payload of a large frame goes on in the buffer it was
// read into (taken from the client's reader); others are copied as the frame is built.
func (x *multiplexed) send(t pb.BaseCommand_Type, command, payload []byte) CloseReason {
	s := x.s
	pay := s.client.r.TakeLarge()
	for attempt := 0; ; attempt++ {
		mb, reason := x.current()
		if mb == nil {
			pay.Put()
			return reason
		}
		var err error
		if pay != nil {
			err = mb.SendOwned(command, payload, pay)
		} else {
			err = mb.Send(command, payload)
		}
		switch {
		case err == nil:
			if t == pb.BaseCommand_SEND && s.srv.sec.Edge.Policed() {
				s.pacePublishing(frame.HeaderSize + len(command) + len(payload)) // a role's publish rate
			}
			return ""
		case errors.Is(err, mux.ErrLost) && attempt < 2:
			continue // lost meanwhile: once more on a new connection
		}
		reason = x.refused(command, err) // command may be in pay
		pay.Put()
		return reason
	}
}

// refused handles a command the mapping would not send: one that uses an id the client does
// not have on the connection (closed, refused by the broker, closed by the proxy after a lost
// connection) or whose creation the broker has not accepted is answered as a broker answers
// an id it lacks (mux.NotFound), a command that has no place on a shared connection ends
// the session.
func (x *multiplexed) refused(command []byte, err error) CloseReason {
	s := x.s
	cmd, derr := frame.Decode(command)
	switch {
	case derr != nil || errors.Is(err, frame.ErrMalformed):
		s.srv.metrics.refusedCommands.WithLabelValues(string(edge.ReasonUndecodable)).Inc()
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: cannot read command: "+err.Error()))
		return ReasonCommandRefused
	case errors.Is(err, mux.ErrUnknownID):
		if reply := mux.NotFound(cmd, "pulsar-proxy: "+err.Error()); reply != nil {
			x.inject(reply)
		}
		return ""
	case errors.Is(err, mux.ErrLost):
		x.inject(frame.Error(0, pb.ServerError_ServiceNotReady, "pulsar-proxy: broker connection lost"))
		return ReasonBrokerClosed
	case errors.Is(err, mux.ErrOverBrokerLimit):
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: "+err.Error()))
		return ReasonBadFrame
	}
	s.srv.metrics.refusedCommands.WithLabelValues(string(edge.ReasonType)).Inc()
	x.inject(edge.FailureFor(cmd, pb.ServerError_NotAllowedError, "pulsar-proxy: "+cmd.GetType().String()+" may not be sent on a multiplexed connection"))
	return ReasonCommandRefused
}
