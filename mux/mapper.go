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
// holds it under its lock).
type Mapper struct {
	next  [kinds]uint64
	owner [kinds]map[uint64]ref // connection id → the client's
}

// NewMapper is an empty mapping.
func NewMapper() *Mapper {
	m := &Mapper{}
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

// ids is a command's id fields, in the order of its table entry.
type ids interface {
	get(i int) (uint64, bool) // false: the field is absent (an optional id)
	set(i int, v uint64)
}

// Up rewrites a client's command for the broker connection, in place. Ids the command
// creates are allocated (or, created before, reused: a client repeats a PRODUCER or
// SUBSCRIBE it got no answer to), ids it names must exist, an id it closes is released.
// Nothing changes when an error is returned.
func (m *Mapper) Up(c *Client, cmd *pb.BaseCommand) error {
	table, ok := clientCommands[cmd.GetType()]
	if !ok {
		return fmt.Errorf("%w: %v", ErrNotAllowed, cmd.GetType())
	}
	r, err := newReflectIDs(cmd, table)
	if err != nil {
		return err
	}
	return m.up(c, cmd.GetType(), table, r)
}

func (m *Mapper) up(c *Client, t pb.BaseCommand_Type, table []idField, x ids) error {
	for i, fl := range table { // check before anything changes
		if v, ok := x.get(i); ok && (fl.role == use || fl.role == release) {
			if _, known := c.ids[fl.kind][v]; !known {
				return fmt.Errorf("%w: %v %d in %v", ErrUnknownID, fl.kind, v, t)
			}
		}
	}
	for i, fl := range table {
		own, ok := x.get(i)
		if !ok {
			continue // optional ids (ACK's request_id)
		}
		var mapped uint64
		switch fl.role {
		case create:
			var ok bool
			if mapped, ok = c.ids[fl.kind][own]; !ok {
				mapped = m.alloc(fl.kind, ref{c, own})
				c.ids[fl.kind][own] = mapped
			}
		case use:
			mapped = c.ids[fl.kind][own]
		case release:
			mapped = c.ids[fl.kind][own]
			delete(c.ids[fl.kind], own)
			delete(m.owner[fl.kind], mapped)
		case request:
			mapped = m.alloc(requestID, ref{c, own})
			c.ids[requestID][mapped] = own
		}
		x.set(i, mapped)
	}
	return nil
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
	return m.down(cmd.GetType(), table, r, moreAnswers(cmd), migratedKind(cmd.GetTopicMigrated()))
}

// down maps a broker command's ids back; more: the answer leaves its request open;
// resource: the kind of TOPIC_MIGRATED's resource_id.
func (m *Mapper) down(t pb.BaseCommand_Type, table []idField, x ids, more bool, resource kind) (*Client, error) {
	var owner *Client
	resolved := false
	kindOf := func(k kind) kind {
		if k == resourceID {
			return resource
		}
		return k
	}
	for i, fl := range table {
		v, ok := x.get(i)
		if !ok {
			continue
		}
		r, known := m.owner[kindOf(fl.kind)][v]
		if !known || (resolved && r.client != owner) {
			return nil, fmt.Errorf("%w: %v %d in %v", ErrUnknownID, kindOf(fl.kind), v, t)
		}
		owner, resolved = r.client, true
	}
	if !resolved {
		return nil, fmt.Errorf("%w: %v names no id", ErrUnknownID, t)
	}
	for i, fl := range table {
		mapped, ok := x.get(i)
		if !ok {
			continue
		}
		r := m.owner[kindOf(fl.kind)][mapped]
		if fl.role == answer && !more {
			delete(m.owner[requestID], mapped)
			if r.client != nil {
				delete(r.client.ids[requestID], mapped)
			}
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

// Held is what a client holds on the connection, in the client's ids and the connection's.
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
			}
			delete(m.owner[k], mapped)
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
