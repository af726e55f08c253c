package session

import (
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// routedBroker is a routed client's place on one broker's shared connection: attached when
// the first command for that broker is sent, again after the connection was lost.
type routedBroker struct {
	x    *routed
	addr string

	mu     chan struct{} // held while attaching (a dial): one attach at a time
	member *mux.Member
	att    *attachment // the member's handler: a Lost of an older one is not this one's
}

// attachment is the handler of one attach: the pool tells it what comes for the client.
type attachment struct{ b *routedBroker }

func (a *attachment) Deliver(fs []mux.Frame) error { return a.b.x.deliver(fs) }
func (a *attachment) Lost(held mux.Held)           { a.b.lost(a, held) }

// broker is the client's place at addr, made on first use.
func (x *routed) broker(addr string) *routedBroker {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.brokers[addr]
	if b == nil {
		b = &routedBroker{x: x, addr: addr, mu: make(chan struct{}, 1)}
		x.brokers[addr] = b
	}
	return b
}

// current is the member to send on, attached now if there is none.
func (b *routedBroker) current() (*mux.Member, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	if b.member != nil {
		return b.member, nil
	}
	x := b.x
	if err := x.ctx.Err(); err != nil {
		return nil, err
	}
	a := &attachment{b: b}
	mb, err := x.s.srv.cfg.Routed.Attach(x.ctx, mux.Key{Addr: b.addr, Principal: x.s.role()}, a)
	if err != nil {
		return nil, err
	}
	b.member, b.att = mb, a
	return mb, nil
}

// forget drops a member whose connection was lost, if it is still the current one.
func (b *routedBroker) forget(mb *mux.Member) {
	b.mu <- struct{}{}
	if b.member == mb {
		b.member, b.att = nil, nil
	}
	<-b.mu
}

// lost closes at the client what it had on a broker connection that failed (see
// multiplexed.Lost); its next creation is routed afresh.
func (b *routedBroker) lost(a *attachment, held mux.Held) {
	b.mu <- struct{}{}
	if b.att == a {
		b.member, b.att = nil, nil
	}
	<-b.mu
	x := b.x
	own := uint64(1<<64 - 1) // the request id of a broker's own closes
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

// release lets go of the client's producer or consumer key at this broker (it moved to
// another one).
func (b *routedBroker) release(key routeKey) {
	b.mu <- struct{}{}
	mb := b.member
	<-b.mu
	if mb == nil {
		return
	}
	switch key.kind {
	case routeProducer:
		mb.ReleaseProducer(key.id)
	case routeConsumer:
		mb.ReleaseConsumer(key.id)
	}
}

// leave detaches the client from every broker: its producers and consumers are closed there.
func (x *routed) leave() {
	x.mu.Lock()
	all := make([]*routedBroker, 0, len(x.brokers))
	for _, b := range x.brokers {
		all = append(all, b)
	}
	x.mu.Unlock()
	for _, b := range all {
		b.mu <- struct{}{}
		if b.member != nil {
			b.member.Leave()
			b.member, b.att = nil, nil
		}
		<-b.mu
	}
}

// sendTo puts a command on b's shared connection, attaching anew (twice at most) when the
// connection was lost meanwhile. A broker that cannot be reached fails this command only:
// the client's other brokers go on.
func (x *routed) sendTo(b *routedBroker, cmd *pb.BaseCommand, command, payload []byte) CloseReason {
	s := x.s
	for attempt := 0; ; attempt++ {
		mb, err := b.current()
		if err != nil {
			x.unreachable(cmd, err)
			return ""
		}
		err = mb.Send(command, payload)
		switch {
		case err == nil:
			if cmd.GetType() == pb.BaseCommand_SEND && s.srv.sec.Edge.Policed() {
				s.pacePublishing(frame.HeaderSize + len(command) + len(payload))
			}
			return ""
		case errors.Is(err, mux.ErrLost) && attempt < 2:
			b.forget(mb)
			continue
		}
		return x.refused(cmd, err)
	}
}

// unreachable answers a command whose broker could not be attached to.
func (x *routed) unreachable(cmd *pb.BaseCommand, err error) {
	var refused *upstream.BrokerError
	code, msg := pb.ServerError_ServiceNotReady, "pulsar-proxy: cannot reach broker: "+err.Error()
	if errors.As(err, &refused) {
		code, msg = refused.Code, refused.Message
	}
	x.inject(routedFailure(cmd, code, msg))
}

// refused handles a command the mapping would not send (see multiplexed.refused); a broker
// connection lost again fails this command only.
func (x *routed) refused(cmd *pb.BaseCommand, err error) CloseReason {
	switch {
	case errors.Is(err, frame.ErrMalformed):
		x.s.srv.metrics.refusedCommands.WithLabelValues(string(edge.ReasonUndecodable)).Inc()
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: cannot read command: "+err.Error()))
		return ReasonCommandRefused
	case errors.Is(err, mux.ErrUnknownID):
		x.inject(mux.NotFound(cmd, "pulsar-proxy: "+err.Error()))
		return ""
	case errors.Is(err, mux.ErrLost):
		x.inject(routedFailure(cmd, pb.ServerError_ServiceNotReady, "pulsar-proxy: broker connection lost, retry"))
		return ""
	case errors.Is(err, mux.ErrOverBrokerLimit):
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: "+err.Error()))
		return ReasonBadFrame
	}
	x.s.srv.metrics.refusedCommands.WithLabelValues(string(edge.ReasonType)).Inc()
	x.inject(edge.FailureFor(cmd, pb.ServerError_NotAllowedError, "pulsar-proxy: "+cmd.GetType().String()+" may not be sent on a routed connection"))
	return ReasonCommandRefused
}

// deliver takes a broker's frames for the client (the connection's reader: never waits). A
// broker's close of a producer or consumer may name the broker it moved to
// (assignedBrokerServiceUrl, the extensible load manager's): the client must not go there
// but come back through the proxy, which looks the topic up again, so the names are taken
// out.
func (x *routed) deliver(fs []mux.Frame) error {
	return x.pushSorted(fs, isClose, x.closeElsewhere)
}

// isClose reports whether a broker frame closes a producer or a consumer.
func isClose(f mux.Frame) bool {
	t, err := f.Type()
	return err == nil && (t == pb.BaseCommand_CLOSE_PRODUCER || t == pb.BaseCommand_CLOSE_CONSUMER)
}

// closeElsewhere passes on a broker's close without the broker it names.
func (x *routed) closeElsewhere(f mux.Frame) error {
	cmd, err := frame.Decode(f.Command())
	if err != nil {
		return x.push(f)
	}
	f.Release() // what goes on is cmd
	if p := cmd.GetCloseProducer(); p != nil {
		p.AssignedBrokerServiceUrl, p.AssignedBrokerServiceUrlTls = nil, nil
	}
	if c := cmd.GetCloseConsumer(); c != nil {
		c.AssignedBrokerServiceUrl, c.AssignedBrokerServiceUrlTls = nil, nil
	}
	return x.inject(cmd)
}
