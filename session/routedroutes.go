package session

import (
	"errors"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
)

// routeKind is what a route leads to: a producer or a consumer (by the client's id), a
// transaction coordinator (by its id), or a topic's schema (GET_OR_CREATE_SCHEMA).
type routeKind uint8

const (
	routeProducer routeKind = iota
	routeConsumer
	routeCoordinator
	routeSchema
)

type routeKey struct {
	kind  routeKind
	id    uint64
	topic string // routeSchema
}

// route is where one key's commands go: its broker once looked up, and the commands that
// came while it was being looked up, sent in order once it is known (so no command of the
// key overtakes another).
type route struct {
	broker    *routedBroker // nil until the first lookup succeeded
	resolving bool
	held      []heldCommand
	closed    bool // the last command sent closed what the key names
}

// heldCommand is a command kept while its route is looked up (copies: the reader's buffer
// is reused).
type heldCommand struct {
	cmd              *pb.BaseCommand
	command, payload []byte
	relook           bool // a creation that came while its key was being looked up (see lookUp)
}

func (h heldCommand) size() int { return len(h.command) + len(h.payload) }

// routing is how one command is routed: by key; topic names whose owner serves it (for a
// key not routed yet, or fresh); fresh: looked up anew even when routed before (it creates
// what the key names, and the topic may have moved since); release: it closes what the key
// names.
type routing struct {
	key            routeKey
	topic          string
	fresh, release bool
}

// routedTypes are the commands a routed session sends to brokers, each with its routing.
var routedTypes = map[pb.BaseCommand_Type]func(*pb.BaseCommand) routing{
	pb.BaseCommand_PRODUCER: func(c *pb.BaseCommand) routing {
		return routing{key: routeKey{kind: routeProducer, id: c.GetProducer().GetProducerId()}, topic: c.GetProducer().GetTopic(), fresh: true}
	},
	pb.BaseCommand_SUBSCRIBE: func(c *pb.BaseCommand) routing {
		return routing{key: routeKey{kind: routeConsumer, id: c.GetSubscribe().GetConsumerId()}, topic: c.GetSubscribe().GetTopic(), fresh: true}
	},
	pb.BaseCommand_SEND:           producerUse(func(c *pb.BaseCommand) uint64 { return c.GetSend().GetProducerId() }, false),
	pb.BaseCommand_CLOSE_PRODUCER: producerUse(func(c *pb.BaseCommand) uint64 { return c.GetCloseProducer().GetProducerId() }, true),
	pb.BaseCommand_ACK:            consumerUse(func(c *pb.BaseCommand) uint64 { return c.GetAck().GetConsumerId() }, false),
	pb.BaseCommand_FLOW:           consumerUse(func(c *pb.BaseCommand) uint64 { return c.GetFlow().GetConsumerId() }, false),
	pb.BaseCommand_UNSUBSCRIBE:    consumerUse(func(c *pb.BaseCommand) uint64 { return c.GetUnsubscribe().GetConsumerId() }, false),
	pb.BaseCommand_CLOSE_CONSUMER: consumerUse(func(c *pb.BaseCommand) uint64 { return c.GetCloseConsumer().GetConsumerId() }, true),
	pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES: consumerUse(func(c *pb.BaseCommand) uint64 {
		return c.GetRedeliverUnacknowledgedMessages().GetConsumerId()
	}, false),
	pb.BaseCommand_CONSUMER_STATS:      consumerUse(func(c *pb.BaseCommand) uint64 { return c.GetConsumerStats().GetConsumerId() }, false),
	pb.BaseCommand_SEEK:                consumerUse(func(c *pb.BaseCommand) uint64 { return c.GetSeek().GetConsumerId() }, false),
	pb.BaseCommand_GET_LAST_MESSAGE_ID: consumerUse(func(c *pb.BaseCommand) uint64 { return c.GetGetLastMessageId().GetConsumerId() }, false),
	pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST: func(c *pb.BaseCommand) routing {
		r := coordinator(c.GetTcClientConnectRequest().GetTcId())
		r.fresh = true
		return r
	},
	pb.BaseCommand_NEW_TXN:                 func(c *pb.BaseCommand) routing { return coordinator(c.GetNewTxn().GetTcId()) },
	pb.BaseCommand_ADD_PARTITION_TO_TXN:    func(c *pb.BaseCommand) routing { return coordinator(c.GetAddPartitionToTxn().GetTxnidMostBits()) },
	pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN: func(c *pb.BaseCommand) routing { return coordinator(c.GetAddSubscriptionToTxn().GetTxnidMostBits()) },
	pb.BaseCommand_END_TXN:                 func(c *pb.BaseCommand) routing { return coordinator(c.GetEndTxn().GetTxnidMostBits()) },
	pb.BaseCommand_GET_OR_CREATE_SCHEMA: func(c *pb.BaseCommand) routing {
		t := c.GetGetOrCreateSchema().GetTopic()
		return routing{key: routeKey{kind: routeSchema, topic: t}, topic: t, fresh: true, release: true}
	},
}

func producerUse(id func(*pb.BaseCommand) uint64, release bool) func(*pb.BaseCommand) routing {
	return func(c *pb.BaseCommand) routing {
		return routing{key: routeKey{kind: routeProducer, id: id(c)}, release: release}
	}
}

func consumerUse(id func(*pb.BaseCommand) uint64, release bool) func(*pb.BaseCommand) routing {
	return func(c *pb.BaseCommand) routing {
		return routing{key: routeKey{kind: routeConsumer, id: id(c)}, release: release}
	}
}

// coordinator routes to the broker that runs transaction coordinator id (the owner of its
// partition of the coordinators' topic); a transaction's id carries its coordinator's in its
// most significant bits.
func coordinator(id uint64) routing {
	return routing{key: routeKey{kind: routeCoordinator, id: id}, topic: edge.CoordinatorTopic(id)}
}

// routingOf is how cmd is routed; false: no broker serves it on a client's behalf.
func routingOf(cmd *pb.BaseCommand) (routing, bool) {
	f, ok := routedTypes[cmd.GetType()]
	if !ok {
		return routing{}, false
	}
	return f(cmd), true
}

// dispatch sends a command its route's way: held behind its route's lookup, a lookup
// started (a creation, or a first use of a coordinator), straight to its broker, or
// answered as a broker answers an id it does not have.
func (x *routed) dispatch(rt routing, cmd *pb.BaseCommand, command, payload []byte) CloseReason {
	x.mu.Lock()
	r := x.routes[rt.key]
	for r != nil && r.resolving && x.heldBytes > 0 && x.heldBytes+len(command)+len(payload) > maxHeldBytes {
		x.settled.Wait() // the client's reading waits: what it holds is bounded
		r = x.routes[rt.key]
	}
	switch {
	case r != nil && r.resolving && !rt.fresh:
		defer x.mu.Unlock()
		if len(r.held) >= maxHeldCommands {
			x.injectTooManyHeld(cmd)
			return ""
		}
		x.holdLocked(r, cmd, command, payload)
		return ""
	case rt.fresh || (r == nil && rt.topic != ""):
		x.mu.Unlock()
		return x.lookUp(rt, cmd, command, payload)
	case r == nil || r.broker == nil:
		x.mu.Unlock()
		x.inject(mux.NotFound(cmd, "pulsar-proxy: "+cmd.GetType().String()+" names a producer or consumer this connection does not have"))
		return ""
	}
	b := r.broker
	r.closed = rt.release
	if rt.release {
		delete(x.routes, rt.key)
	}
	x.mu.Unlock()
	return x.sendTo(b, cmd, command, payload)
}

func (x *routed) holdLocked(r *route, cmd *pb.BaseCommand, command, payload []byte) *heldCommand {
	h := heldCommand{cmd: cmd, command: append([]byte(nil), command...), payload: append([]byte(nil), payload...)}
	r.held = append(r.held, h)
	x.heldBytes += h.size()
	return &r.held[len(r.held)-1]
}

func (x *routed) injectTooManyHeld(cmd *pb.BaseCommand) {
	x.inject(routedFailure(cmd, pb.ServerError_TooManyRequests, "pulsar-proxy: too many commands wait for this producer's or consumer's broker, retry later"))
}

// lookUp starts looking up the owner of rt's topic for cmd, if the client may look it up
// (mayLookUp), within the connection's and the proxy's bounds on lookups in flight (as a
// lookup connection's requests); the route's commands wait behind it. A creation that comes
// while its key is being looked up waits behind that lookup, in order, and is looked up
// afresh when its turn comes (see flush): its topic may have moved meanwhile (a broker's
// close that says so can reach the client before the commands held behind the lookup are
// all sent), and sent with them it went where the topic was.
func (x *routed) lookUp(rt routing, cmd *pb.BaseCommand, command, payload []byte) CloseReason {
	if rt.topic != "" && !x.mayLookUp(rt.topic, cmd) {
		return ""
	}
	if !x.l.admit(cmd) { // answered (TooManyRequests: clients retry)
		return ""
	}
	x.mu.Lock()
	for x.heldBytes > 0 && x.heldBytes+len(command)+len(payload) > maxHeldBytes {
		x.settled.Wait() // as in dispatch: a creation is held too (a schema's can be large)
	}
	r := x.routes[rt.key]
	if r == nil {
		if len(x.routes) >= maxRoutes {
			x.mu.Unlock()
			<-x.l.slots
			x.s.srv.giveLookup()
			x.inject(routedFailure(cmd, pb.ServerError_TooManyRequests, "pulsar-proxy: too many producers, consumers and transactions on this connection"))
			return ""
		}
		r = &route{}
		x.routes[rt.key] = r
	}
	if r.resolving {
		defer x.mu.Unlock()
		if len(r.held) >= maxHeldCommands {
			<-x.l.slots
			x.s.srv.giveLookup()
			x.injectTooManyHeld(cmd)
			return ""
		}
		x.holdLocked(r, cmd, command, payload).relook = true // its lookup's places taken
		return ""
	}
	r.resolving = true
	x.holdLocked(r, cmd, command, payload)
	x.mu.Unlock()
	x.resolve(rt, r)
	return ""
}

// resolve looks up the owner of rt's topic, in the background, and then sends what waits
// for the route (its lookup's places were taken).
func (x *routed) resolve(rt routing, r *route) {
	x.resolving.Add(1)
	go func() {
		defer x.resolving.Done()
		b, err := x.owner(rt.topic)
		x.moveTo(rt, r, b, err)
		x.flush(rt, r, err)
	}()
}

// mayLookUp asks the edge about the owner lookup a command needs, as the client's own LOOKUP
// of topic: the role must be allowed to look it up (as a binary- or HTTP-lookup client must),
// and the lookup counts in its lookup rate, so creating producers over and over cannot
// look topics up beyond it. A refusal answers cmd with the lookup's error.
func (x *routed) mayLookUp(topic string, cmd *pb.BaseCommand) bool {
	s := x.s
	d := s.srv.sec.Edge.Decoded(s.identityNow(), edge.Lookup, ownerLookup(topic))
	if d.Outcome == edge.Forward {
		return true
	}
	s.countRefusal(d)
	code, msg := pb.ServerError_AuthorizationError, "pulsar-proxy: looking up "+topic+" refused"
	if lr := d.Reply.GetLookupTopicResponse(); lr != nil {
		code, msg = lr.GetError(), lr.GetMessage()
	}
	x.inject(routedFailure(cmd, code, msg))
	return false
}

// ownerLookup is the LOOKUP that finds topic's owner.
func ownerLookup(topic string) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(0)}}
}

// owner looks up the broker that owns topic, as the client (its role), then gives the
// lookup's places back.
func (x *routed) owner(topic string) (*routedBroker, error) {
	s := x.s
	defer func() { <-x.l.slots; s.srv.giveLookup() }()
	if topic == "" {
		return nil, &lookup.Error{Code: pb.ServerError_MetadataError, Message: "pulsar-proxy: no topic to route by"}
	}
	resp, err := s.srv.resolver.Resolve(x.ctx, s.brokerClient(), ownerLookup(topic))
	if err != nil {
		return nil, err
	}
	lr := resp.GetLookupTopicResponse()
	switch {
	case resp.GetType() == pb.BaseCommand_ERROR:
		return nil, &lookup.Error{Code: resp.GetError().GetError(), Message: resp.GetError().GetMessage()}
	case lr.GetResponse() != pb.CommandLookupTopicResponse_Connect:
		return nil, &lookup.Error{Code: lr.GetError(), Message: "pulsar-proxy: looking up " + topic + ": " + lr.GetMessage()}
	}
	url := lr.GetBrokerServiceUrl()
	if url == "" {
		url = lr.GetBrokerServiceUrlTls()
	}
	b, err := s.srv.targets.Allow(url)
	if err != nil {
		return nil, &lookup.Error{Code: pb.ServerError_ServiceNotReady, Message: "pulsar-proxy: " + err.Error()}
	}
	return x.broker(b.Addr()), nil
}

// moveTo records a lookup's result: the route's new broker, and the old one told to let go
// of the client's producer or consumer when it moved.
func (x *routed) moveTo(rt routing, r *route, b *routedBroker, err error) {
	result := "failed"
	x.mu.Lock()
	old := r.broker
	if err == nil {
		r.broker, result = b, "ok"
	}
	x.mu.Unlock()
	if err == nil && old != nil && old != b {
		result = "moved"
		old.release(rt.key)
	}
	x.s.srv.metrics.routed.WithLabelValues(result).Inc()
}

// flush sends what waited for the route, in order (or, when the lookup failed, answers it),
// and lets the route's commands go straight to its broker again once none is left. A
// creation that came while the lookup was under way is looked up afresh once what came
// before it was sent, what came after it waiting behind its lookup (relookLocked).
func (x *routed) flush(rt routing, r *route, failed error) {
	for {
		x.mu.Lock()
		held := x.takeHeldLocked(r)
		b := r.broker
		if len(held) == 0 && len(r.held) == 0 {
			r.resolving = false
			if r.closed || b == nil || rt.release {
				delete(x.routes, rt.key)
			}
			x.mu.Unlock()
			return
		}
		if len(held) == 0 { // a creation that came during the lookup is next
			next := x.relookLocked(r)
			x.mu.Unlock()
			if next != nil {
				x.resolve(*next, r)
				return
			}
			failed = x.ctx.Err() // the session ends: what is left is answered
			continue
		}
		x.mu.Unlock()
		for _, h := range held {
			x.sendHeld(rt, r, b, h, failed)
		}
	}
}

// takeHeldLocked takes the route's held commands up to the first creation to be looked up
// afresh (which stays, with what came after it, counted in the connection's held bytes).
func (x *routed) takeHeldLocked(r *route) []heldCommand {
	n := slices.IndexFunc(r.held, func(h heldCommand) bool { return h.relook })
	if n < 0 {
		n = len(r.held)
	}
	held := r.held[:n:n]
	r.held = r.held[n:]
	for _, h := range held {
		x.heldBytes -= h.size()
	}
	x.settled.Broadcast()
	return held
}

// relookLocked readies the creation at the front of the route's held commands to be sent
// once its own lookup ended, and returns its routing; nil when the session ends (its
// lookup's places are given back, and it is answered as a failed lookup's commands are).
func (x *routed) relookLocked(r *route) *routing {
	h := &r.held[0]
	h.relook = false
	if x.ctx.Err() != nil {
		<-x.l.slots
		x.s.srv.giveLookup()
		return nil
	}
	next, _ := routingOf(h.cmd)
	return &next
}

// sendHeld sends one command that waited for its route (b nil: its lookup failed).
func (x *routed) sendHeld(rt routing, r *route, b *routedBroker, h heldCommand, failed error) {
	if failed != nil || b == nil {
		code, msg := pb.ServerError_ServiceNotReady, "pulsar-proxy: cannot find the broker of "+rt.topic
		var le *lookup.Error
		if errors.As(failed, &le) {
			code, msg = le.Code, le.Message
		} else if failed != nil {
			msg += ": " + failed.Error()
		}
		x.inject(routedFailure(h.cmd, code, msg))
		return
	}
	this, _ := routingOf(h.cmd)
	x.mu.Lock()
	r.closed = this.release
	x.mu.Unlock()
	if reason := x.sendTo(b, h.cmd, h.command, h.payload); reason != "" {
		x.s.close(reason)
	}
}

// routedFailure is the answer to a command the proxy could not route: what a broker answers
// for an id it lacks where the command names one (mux.NotFound: closes succeed, SEND is
// dropped), else the command's failure form with code.
func routedFailure(cmd *pb.BaseCommand, code pb.ServerError, msg string) *pb.BaseCommand {
	switch cmd.GetType() {
	case pb.BaseCommand_CLOSE_PRODUCER, pb.BaseCommand_CLOSE_CONSUMER, pb.BaseCommand_CONSUMER_STATS:
		return mux.NotFound(cmd, msg)
	}
	if _, ok := frame.RequestID(cmd); !ok {
		return nil
	}
	return edge.FailureFor(cmd, code, msg)
}
