// Package pulsarclient is the proxy's own Pulsar client over its frame codec: producers and
// consumers (and readers) at brokers for a client that does not speak the binary protocol
// itself (the WebSocket plane). One Client serves one such client: its broker connections
// are its own, opened with upstream.Connector in the client's name (original_principal), so
// a broker authorizes every producer and consumer for that role, and whatever the broker
// does to one connection touches no other client. Topics are looked up through the proxy's
// resolver (redirects followed inside the target rule); partitioned topics get a producer or
// consumer per partition, each on the connection to its own broker; producers and consumers
// come back after a topic unload or a broker restart as a Pulsar client's do.
package pulsarclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Resolver answers lookups (lookup.Resolver): LOOKUP with redirects followed, and
// PARTITIONED_METADATA, asked as client.
type Resolver interface {
	Resolve(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error)
}

// Targets is the target rule (brokers.Set): a broker a lookup named may be dialled only
// when the rule allows it.
type Targets interface {
	Allow(target string) (brokers.Broker, error)
}

// Config is what every Client of the proxy shares.
type Config struct {
	Connector *upstream.Connector
	Resolver  Resolver
	Targets   Targets
	// OperationTimeout bounds a lookup, a PRODUCER or a SUBSCRIBE (30 s when 0).
	OperationTimeout time.Duration
	// KeepAlive is how often an idle broker connection is pinged; one silent for two of them
	// is closed (30 s when 0).
	KeepAlive time.Duration
	// MaxMessageSize bounds a message after decompression (5 MiB when 0).
	MaxMessageSize int
	Logger         zerolog.Logger
	// Buffered, when set, is told every change of the bytes consumers hold received ahead of
	// their clients (a gauge's Add).
	Buffered interface{ Add(float64) }
}

func (c *Config) defaults() {
	if c.OperationTimeout <= 0 {
		c.OperationTimeout = 30 * time.Second
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 30 * time.Second
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = 5 << 20
	}
}

// Factory makes the Clients of one proxy: they share its configuration and codecs.
type Factory struct {
	cfg    Config
	codecs *codecs
}

// NewFactory makes a Factory.
func NewFactory(cfg Config) *Factory {
	cfg.defaults()
	return &Factory{cfg: cfg, codecs: newCodecs()}
}

// Client is one client's producers and consumers and their broker connections.
type Client struct {
	cfg    Config
	codecs *codecs
	who    upstream.Client
	from   *upstream.Origin
	log    zerolog.Logger
	ids    atomic.Uint64 // producer, consumer and request ids
	mu     sync.Mutex
	conns  map[string]*connSlot // by broker address
	closed bool
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
}

// connSlot is a broker connection, or the dial of one in progress (ready closes when done).
type connSlot struct {
	ready chan struct{}
	conn  *conn
	err   error
}

// ErrClosed is the error of everything after Close.
var ErrClosed = errors.New("pulsar client closed")

// New makes a Client for who (from: the client's addresses, for a PROXY header); nothing is
// dialled until a producer or consumer is made.
func (f *Factory) New(who upstream.Client, from *upstream.Origin) *Client {
	cfg := f.cfg
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{cfg: cfg, codecs: f.codecs, who: who, from: from, log: cfg.Logger, conns: map[string]*connSlot{}, ctx: ctx, cancel: cancel}
}

// Close closes every broker connection; producers and consumers end with them.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	slots := c.conns
	c.conns = map[string]*connSlot{}
	c.mu.Unlock()
	c.cancel()
	for _, s := range slots {
		<-s.ready
		if s.conn != nil {
			s.conn.close(ErrClosed)
		}
	}
}

func (c *Client) nextID() uint64 { return c.ids.Add(1) }

// conn returns the connection to the broker at addr, dialling it when there is none.
func (c *Client) conn(ctx context.Context, addr string) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	s := c.conns[addr]
	if s != nil {
		select {
		case <-s.ready:
			if s.err != nil || s.conn.isClosed() {
				s = nil // dial again
			}
		default:
		}
	}
	if s == nil {
		s = &connSlot{ready: make(chan struct{})}
		c.conns[addr] = s
		go c.dial(addr, s)
	}
	c.mu.Unlock()
	select {
	case <-s.ready:
		return s.conn, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Client) dial(addr string, s *connSlot) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.OperationTimeout)
	defer cancel()
	uc, err := c.cfg.Connector.Open(ctx, addr, c.from, nil, c.who)
	if err == nil {
		s.conn = newConn(c, addr, uc)
	}
	s.err = err
	close(s.ready)
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed && s.conn != nil {
		s.conn.close(ErrClosed)
	}
}

// lookup finds the broker that serves topic and checks it against the target rule.
func (c *Client) lookup(ctx context.Context, topic string) (string, error) {
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(0)}}
	resp, err := c.cfg.Resolver.Resolve(ctx, c.who, cmd)
	if err != nil {
		return "", &Error{Code: pb.ServerError_ServiceNotReady, Message: err.Error()}
	}
	lr := resp.GetLookupTopicResponse()
	if resp.GetType() != pb.BaseCommand_LOOKUP_RESPONSE || lr.GetResponse() == pb.CommandLookupTopicResponse_Failed {
		return "", &Error{Code: lr.GetError(), Message: lr.GetMessage()}
	}
	b, err := brokers.ParseURL(lr.GetBrokerServiceUrl())
	if err != nil {
		return "", &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s: %v", topic, err)}
	}
	if _, err := c.cfg.Targets.Allow(b.Addr()); err != nil {
		return "", &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s named %s: %v", topic, b.Addr(), err)}
	}
	return b.Addr(), nil
}

// Partitions is the number of partitions of topic (0: not partitioned).
func (c *Client) Partitions(ctx context.Context, topic string) (int, error) {
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String(topic), RequestId: proto.Uint64(0)}}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.OperationTimeout)
	defer cancel()
	resp, err := c.cfg.Resolver.Resolve(ctx, c.who, cmd)
	if err != nil {
		return 0, &Error{Code: pb.ServerError_ServiceNotReady, Message: err.Error()}
	}
	pm := resp.GetPartitionMetadataResponse()
	if resp.GetType() != pb.BaseCommand_PARTITIONED_METADATA_RESPONSE || pm.GetResponse() == pb.CommandPartitionedTopicMetadataResponse_Failed {
		if resp.GetType() == pb.BaseCommand_ERROR {
			return 0, &Error{Code: resp.GetError().GetError(), Message: resp.GetError().GetMessage()}
		}
		return 0, &Error{Code: pm.GetError(), Message: pm.GetMessage()}
	}
	return int(pm.GetPartitions()), nil
}

// Error is a broker's (or the lookup's) refusal.
type Error struct {
	Code    pb.ServerError
	Message string
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Message }

// CodeOf is the ServerError of err, or UnknownError.
func CodeOf(err error) pb.ServerError {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return pb.ServerError_UnknownError
}

// retryableFirst reports whether a first PRODUCER or SUBSCRIBE that failed with err may
// succeed if tried again within the operation timeout: the broker was not ready or not
// reached. Anything else (a busy name, a refusal) is the client's answer.
func retryableFirst(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled)
	}
	switch e.Code {
	case pb.ServerError_ServiceNotReady, pb.ServerError_TooManyRequests, pb.ServerError_MetadataError:
		return true
	}
	return false
}

// fatal reports whether a producer or consumer that was made once must give up coming
// back after err: the topic is gone or closed for good, or the client lost its rights.
// Anything else is tried again with backoff, as Pulsar's clients do.
func fatal(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) {
		return true
	}
	switch CodeOf(err) {
	case pb.ServerError_TopicTerminatedError, pb.ServerError_ProducerFenced, pb.ServerError_NotAllowedError,
		pb.ServerError_AuthorizationError, pb.ServerError_AuthenticationError, pb.ServerError_TopicNotFound:
		return true
	}
	return false
}
