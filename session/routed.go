package session

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// routed serves a client that connected naming no broker (no proxy_to_broker_url) and then
// sent a command only a broker serves: PRODUCER, SUBSCRIBE, a transaction coordinator's. Such
// a client uses the proxy as its broker: it looked its topics up over HTTP, and the proxy
// answered with its own URL (adminproxy, Advertised). A lookup session cannot tell it from a
// binary-lookup client at CONNECT; its first such command can, and the session becomes
// routed then (routedMode) and stays so.
//
// Each producer, consumer and coordinator goes to the broker that owns its topic, looked up
// anew whenever the client creates it (so a topic that moved is followed), over the pool's
// shared connections for that broker and the client's role (package mux), every command
// decided by the edge first. Discovery requests are still answered as on a lookup
// connection. Everything the client is sent goes through one bounded queue.
type routed struct {
	*queuedClient
	l *lookupSession
	// ctx ends when the client's reading ends: lookups and dials for it give up.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	settled   *sync.Cond // a route's lookup ended, or held commands were sent
	routes    map[routeKey]*route
	brokers   map[string]*routedBroker // by address: the client's place on that broker's shared connection
	heldBytes int                      // commands held behind lookups, all routes together
	resolving sync.WaitGroup
}

// Bounds on what a client can make a routed session keep.
const (
	maxRoutes       = 100_000 // producers, consumers, coordinators and schema requests routed at once
	maxHeldBytes    = 1 << 20 // commands held while their route is looked up; beyond it the client's reading waits
	maxHeldCommands = 256     // per route
)

// routes reports whether a command of type t makes a lookup connection routed (when routed
// sessions are on): one a broker serves for a producer, consumer or coordinator.
func (s *session) routes(t pb.BaseCommand_Type) bool {
	if s.srv.cfg.Routed == nil || edge.ServedOnLookup(t) {
		return false
	}
	_, ok := routedTypes[t]
	return ok
}

// routedMode turns the lookup session l into a routed one: its writes go through the
// client's queue from now on, whose writer starts here; reading the client is start's.
func (s *session) routedMode(l *lookupSession) *routed {
	x := &routed{queuedClient: newQueuedClient(s, s.srv.cfg.Routed.ClientQueueBytes()), l: l,
		routes: map[routeKey]*route{}, brokers: map[string]*routedBroker{}}
	x.settled = sync.NewCond(&x.mu)
	x.ctx, x.cancel = context.WithCancel(s.ctx)
	l.stopKeepAlive()
	s.client.idle.Store(nil) // never parked again: a wake must not resume the lookup loop
	s.client.writeThrough(x.out)
	x.startWriter()
	s.enter(modeRouted)
	s.mu.Lock()
	s.served = x
	s.mu.Unlock()
	return x
}

// start reads the client on a goroutine of its own, which ends the session; first is why
// the session ends already ("" when it goes on): the command that made it routed may have
// ended it.
func (x *routed) start(first CloseReason) {
	go func() { x.s.end(x.run(first)) }()
}

// serve: a routed session is started by its lookup session (start), never by the handshake.
func (x *routed) serve() CloseReason { return "" }

// run reads the client until it goes away, then lets the lookups in flight end, leaves
// every broker connection (the client's producers and consumers are closed there) and lets
// the queue empty.
func (x *routed) run(first CloseReason) CloseReason {
	s := x.s
	reason := first
	if reason == "" {
		s.setReadDeadline(time.Time{})          // a drain's stays
		reason, _ = x.readClient(x.handleFrame) // never parked (no waiter)
	}
	x.cancel()
	x.resolving.Wait() // bounded by broker.lookupTimeout and the dial's timeouts
	if reason == ReasonDrained {
		settle(x.bytesOut.Load)
	}
	x.leave()
	x.finishWriter()
	return reason
}

// handleFrame handles one frame of the client: discovery requests (and PING, PONG,
// AUTH_RESPONSE) as its lookup session does, everything else routed.
func (x *routed) handleFrame(fr frame.Frame) CloseReason {
	t, err := frame.PeekType(fr.Command)
	if err != nil {
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: bad frame: "+err.Error()))
		return ReasonBadFrame
	}
	if !edge.ServedOnLookup(t) {
		return x.route(t, fr.Command, fr.Payload)
	}
	cmd, err := frame.Decode(fr.Command)
	if err != nil {
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: bad frame: "+err.Error()))
		return ReasonBadFrame
	}
	return x.l.handle(cmd)
}

// handle routes the command its lookup session read, decoded, without its payload (the one
// that made it routed: a creation, or a command that names an id no route has yet, whose
// payload would go nowhere).
func (x *routed) handle(cmd *pb.BaseCommand) CloseReason {
	s := x.s
	d := s.srv.sec.Edge.Decoded(s.identityNow(), edge.Routed, cmd)
	b, err := proto.Marshal(cmd)
	if err != nil && !d.Rewritten {
		x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: cannot read command: "+err.Error()))
		return ReasonBadFrame
	}
	return x.act(d, cmd.GetType(), b, nil)
}

// route asks the edge about one command and, if it may go, sends it to its route's broker.
func (x *routed) route(t pb.BaseCommand_Type, command, payload []byte) CloseReason {
	s := x.s
	return x.act(s.srv.sec.Edge.Frame(s.identityNow(), edge.Routed, t, command, payload), t, command, payload)
}

// act carries out the edge's decision on one command.
func (x *routed) act(d edge.Decision, t pb.BaseCommand_Type, command, payload []byte) CloseReason {
	s := x.s
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
		if d.Reply != nil {
			x.inject(d.Reply)
		}
		return ""
	}
	rt, ok := routingOf(d.Command)
	if !ok {
		s.srv.metrics.refusedCommands.WithLabelValues(string(edge.ReasonType)).Inc()
		x.inject(edge.FailureFor(d.Command, pb.ServerError_NotAllowedError, "pulsar-proxy: "+t.String()+" may not be sent on a routed connection"))
		return ReasonCommandRefused
	}
	if d.Rewritten {
		b, err := frame.AppendCommand(nil, d.Command)
		if err != nil {
			x.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: cannot read command: "+err.Error()))
			return ReasonCommandRefused
		}
		command = b[frame.HeaderSize:]
	}
	return x.dispatch(rt, d.Command, command, payload)
}
