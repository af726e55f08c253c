package mux

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Errors of the mapping.
var (
	// ErrNotAllowed: a command that has no place on a multiplexed connection (a second
	// CONNECT, an answer from a client, a broker-to-broker command, an unknown type).
	ErrNotAllowed = errors.New("mux: command not allowed from a client")
	// ErrUnknownID: a command names a producer, consumer, watcher or request the mapping
	// does not know (never created, already closed, or the client left).
	ErrUnknownID = errors.New("mux: unknown id")
	// ErrNoSubMessage: the command lacks the sub-message of its type.
	ErrNoSubMessage = errors.New("mux: command has no sub-message for its type")
)

// ref is a client's own id, owned by one client (nil: the proxy itself).
type ref struct {
	client *Client
	id     uint64
}

// Mapper holds the identifier mapping of one broker connection: each client's ids to the
// connection's, and back. Connection ids are never reused, so a late answer for something a
// client closed cannot reach another client. Not safe for concurrent use (the connection
// holds it under its lock: the broker's answer to a creation is taken into the mapping
// before the client can see it, so the client's next command finds it accepted).
//
// A producer, consumer or topic-list watcher is pending from its creation until the broker
// answers it with success (a PRODUCER_SUCCESS that says the producer is not ready yet is not
// that answer), and again after the broker closes it on its side. Commands that use a
// pending id are refused as ErrUnknownID and never sent: a broker closes the whole
// connection on some of them (a SEND for a producer it has not made ready, CONSUMER_STATS
// for a consumer it refused), which would cost every client on it. When the broker refuses
// the creation (ERROR), the id is forgotten on both sides.
type Mapper struct {
	next  [kinds]uint64
	owner [kinds]map[uint64]ref // connection id → the client's
	// pending holds the ids not accepted now, each with how many of its creations the
	// broker has still to answer since it last had none.
	pending map[entity]int
	// creating is what each creation request (by the connection's request id) creates.
	creating map[uint64]entity
}

// entity is a producer, consumer or watcher by its connection id.
type entity struct {
	kind kind
	id   uint64
}

// NewMapper is an empty mapping.
func NewMapper() *Mapper {
	m := &Mapper{pending: map[entity]int{}, creating: map[uint64]entity{}}
	for k := range m.owner {
		m.owner[k] = map[uint64]ref{}
	}
	return m
}

// Client is one client's side of a mapping: its ids to the connection's.
type Client struct {
	ids      [kinds]map[uint64]uint64 // the client's id → the connection's; requests: the connection's → the client's
	detached bool
}

// NewClient is a client with no ids yet.
func NewClient() *Client {
	c := &Client{}
	for k := range c.ids {
		c.ids[k] = map[uint64]uint64{}
	}
	return c
}

// InUse is how many ids of each kind the mapping holds for all its clients.
func (m *Mapper) InUse() (n int) {
	for k := range m.owner {
		n += len(m.owner[k])
	}
	return n
}

func (m *Mapper) alloc(k kind, owner ref) uint64 {
	m.next[k]++
	m.owner[k][m.next[k]] = owner
	return m.next[k]
}

// subMessage is the command's own sub-message (the field whose number is its type).
func subMessage(cmd *pb.BaseCommand) (protoreflect.Message, error) {
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protowire.Number(cmd.GetType()))
	if fd == nil || fd.Message() == nil || !m.Has(fd) {
		return nil, ErrNoSubMessage
	}
	return m.Mutable(fd).Message(), nil
}

// maxIDs bounds the id fields of one command (the tables' longest entry).
const maxIDs = 4

// idSet is a command's id fields, in the order of its table entry, as the mapping reads and
// writes them (a plain value: nothing of it escapes to the heap on the data path).
type idSet struct {
	vals [maxIDs]uint64
	has  [maxIDs]bool // false: the field is absent (an optional id)
}

func (x *idSet) get(i int) (uint64, bool) { return x.vals[i], x.has[i] }
func (x *idSet) set(i int, v uint64)      { x.vals[i] = v }

// Up rewrites a client's command for the broker connection, in place. Ids the command
// creates are allocated (or, created before, reused: a client repeats a PRODUCER or
// SUBSCRIBE it got no answer to), ids it uses must exist and be accepted by the broker, an
// id it closes (pending or not: a broker cancels a creation so) is released. Nothing
// changes when an error is returned.
func (m *Mapper) Up(c *Client, cmd *pb.BaseCommand) error {
	table, ok := clientCommands[cmd.GetType()]
	if !ok {
		return fmt.Errorf("%w: %v", ErrNotAllowed, cmd.GetType())
	}
	r, err := newReflectIDs(cmd, table)
	if err != nil {
		return err
	}
	if err := m.up(c, cmd.GetType(), table, &r.ids); err != nil {
		return err
	}
	r.apply()
	return nil
}

func (m *Mapper) up(c *Client, t pb.BaseCommand_Type, table []idField, x *idSet) error {
	for i, fl := range table { // check before anything changes
		if v, ok := x.get(i); ok && (fl.role == use || fl.role == release) {
			mapped, known := c.ids[fl.kind][v]
			if !known {
				return fmt.Errorf("%w: %v %d in %v", ErrUnknownID, fl.kind, v, t)
			}
			if fl.role == use && m.isPending(fl.kind, mapped) {
				return fmt.Errorf("%w: %v %d in %v: the broker has not accepted its creation", ErrUnknownID, fl.kind, v, t)
			}
		}
	}
	made := entity{kind: kinds} // what the command creates, if it does
	for i, fl := range table {
		own, ok := x.get(i)
		if !ok {
			continue // optional ids (ACK's request_id)
		}
		var mapped uint64
		switch fl.role {
		case create:
			mapped = m.created(c, fl.kind, own)
			made = entity{fl.kind, mapped}
		case use:
			mapped = c.ids[fl.kind][own]
		case release:
			mapped = c.ids[fl.kind][own]
			delete(c.ids[fl.kind], own)
			delete(m.owner[fl.kind], mapped)
			delete(m.pending, entity{fl.kind, mapped})
		case request:
			mapped = m.alloc(requestID, ref{c, own})
			c.ids[requestID][mapped] = own
			if made.kind != kinds {
				m.asked(made, mapped)
			}
		}
		x.set(i, mapped)
	}
	return nil
}

// isPending reports whether the broker has not accepted id (of kind k) now. Cheap when
// nothing is pending: it is asked for every SEND, ACK and FLOW.
func (m *Mapper) isPending(k kind, id uint64) bool {
	if len(m.pending) == 0 {
		return false
	}
	_, p := m.pending[entity{k, id}]
	return p
}

// created is the connection id of a creation: a new one, pending, or the one the client's
// id has (a client repeats a creation it got no answer to).
func (m *Mapper) created(c *Client, k kind, own uint64) uint64 {
	if mapped, ok := c.ids[k][own]; ok {
		return mapped
	}
	mapped := m.alloc(k, ref{c, own})
	c.ids[k][own] = mapped
	m.pending[entity{k, mapped}] = 0
	return mapped
}

// asked notes a creation request on its way: one more answer to wait for, if e is pending
// (a repeat for an accepted id changes nothing whatever its answer: the broker keeps it).
func (m *Mapper) asked(e entity, request uint64) {
	m.creating[request] = e
	if n, p := m.pending[e]; p {
		m.pending[e] = n + 1
	}
}

// settle takes the broker's final answer (of type t) to a creation request: success
// accepts the id; a refusal forgets it once no other creation of it is left to answer and
// none succeeded (a broker refuses a repeat that comes while the first is under way, and
// that first may still succeed).
func (m *Mapper) settle(request uint64, t pb.BaseCommand_Type) {
	e, ok := m.creating[request]
	if !ok {
		return
	}
	delete(m.creating, request)
	n, p := m.pending[e]
	switch {
	case !p: // accepted, or forgotten since (its connection id is never used again)
	case t == acceptedBy[e.kind]:
		delete(m.pending, e)
	case n > 1:
		m.pending[e] = n - 1
	default:
		m.forget(e)
	}
}

// revoke takes the broker's own close of an id: the broker no longer has it, and answers
// still to come speak for what it does with the client's next creation.
func (m *Mapper) revoke(e entity) { m.pending[e] = 0 }

// forget drops an id the broker refused, on both sides.
func (m *Mapper) forget(e entity) {
	r := m.owner[e.kind][e.id]
	delete(m.owner[e.kind], e.id)
	delete(m.pending, e)
	if r.client != nil && r.client.ids[e.kind][r.id] == e.id {
		delete(r.client.ids[e.kind], r.id)
	}
}

// Request takes a request id for the proxy's own request (its answer is dropped).
func (m *Mapper) Request() uint64 { return m.alloc(requestID, ref{}) }

// Down rewrites a broker's command for the client it belongs to, in place, and returns that
// client. nil and no error: the answer to the proxy's own request. ErrUnknownID: nobody's
// (a client that closed it or left); the command is to be dropped.
func (m *Mapper) Down(cmd *pb.BaseCommand) (*Client, error) {
	table, ok := brokerCommands[cmd.GetType()]
	if !ok {
		return nil, fmt.Errorf("%w: %v from a broker", ErrNotAllowed, cmd.GetType())
	}
	r, err := newReflectIDs(cmd, table)
	if err != nil {
		return nil, err
	}
	owner, err := m.down(cmd.GetType(), table, &r.ids, moreAnswers(cmd), migratedKind(cmd.GetTopicMigrated()))
	if err == nil {
		r.apply()
	}
	return owner, err
}

// down maps a broker command's ids back; more: the answer leaves its request open;
// resource: the kind of TOPIC_MIGRATED's resource_id.
func (m *Mapper) down(t pb.BaseCommand_Type, table []idField, x *idSet, more bool, resource kind) (*Client, error) {
	var owner *Client
	resolved := false
	kindOf := func(k kind) kind {
		if k == resourceID {
			return resource
		}
		return k
	}
	var refs [maxIDs]ref // each id's owner, looked up once
	for i, fl := range table {
		v, ok := x.get(i)
		if !ok {
			continue
		}
		r, known := m.owner[kindOf(fl.kind)][v]
		if !known || (resolved && r.client != owner) {
			return nil, fmt.Errorf("%w: %v %d in %v", ErrUnknownID, kindOf(fl.kind), v, t)
		}
		owner, resolved, refs[i] = r.client, true, r
	}
	if !resolved {
		return nil, fmt.Errorf("%w: %v names no id", ErrUnknownID, t)
	}
	for i, fl := range table {
		mapped, ok := x.get(i)
		if !ok {
			continue
		}
		r := refs[i]
		switch {
		case fl.role == answer && !more:
			delete(m.owner[requestID], mapped)
			if r.client != nil {
				delete(r.client.ids[requestID], mapped)
			}
			m.settle(mapped, t)
		case fl.role == revoke:
			m.revoke(entity{fl.kind, mapped})
		}
		x.set(i, r.id)
	}
	return owner, nil
}

func migratedKind(t *pb.CommandTopicMigrated) kind {
	if t.GetResourceType() == pb.CommandTopicMigrated_Consumer {
		return consumerID
	}
	return producerID
}

// Held is what a client holds on the connection, in the client's ids and the connection's:
// pending ids too (their creation requests are among the requests), since a broker may have
// them by now.
type Held struct {
	Producers, Consumers, Watchers map[uint64]uint64 // the client's id → the connection's
	Requests                       map[uint64]uint64 // the connection's request id → the client's
}

// Detach removes a client from the mapping and returns what it held, so the proxy can
// close it on the broker (the client left) or at the client (the connection broke).
func (m *Mapper) Detach(c *Client) Held {
	h := Held{Producers: c.ids[producerID], Consumers: c.ids[consumerID], Watchers: c.ids[watcherID], Requests: c.ids[requestID]}
	for k := range c.ids {
		for own, mapped := range c.ids[k] {
			if kind(k) == requestID {
				mapped = own // requests are kept by the connection's id
				delete(m.creating, mapped)
			}
			delete(m.owner[k], mapped)
			delete(m.pending, entity{kind(k), mapped})
		}
		c.ids[k] = map[uint64]uint64{}
	}
	c.detached = true
	return h
}

// marshalCommand encodes a command (required fields checked).
func marshalCommand(cmd *pb.BaseCommand) ([]byte, error) {
	return proto.MarshalOptions{}.Marshal(cmd)
}

// release drops one of a client's producers or consumers (k) from the mapping, as a close
// from the client would, and returns its connection id; false when the client has none.
func (m *Mapper) release(c *Client, k kind, own uint64) (uint64, bool) {
	mapped, ok := c.ids[k][own]
	if !ok {
		return 0, false
	}
	delete(c.ids[k], own)
	delete(m.owner[k], mapped)
	delete(m.pending, entity{k, mapped})
	return mapped, true
}
