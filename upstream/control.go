package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/singleflight"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// ControlConfig says how the proxy keeps its own connections to brokers.
type ControlConfig struct {
	Connector      *Connector
	MaxPending     int // requests in flight per broker connection
	ConnsPerBroker int // connections per broker for the proxy's own requests, used in turn
	Logger         zerolog.Logger
	// MaxPrincipals bounds the per-principal lookup connections (per broker and principal
	// one); the least recently used is closed beyond it. 0: 1000.
	MaxPrincipals int
}

// Control keeps one long-lived connection per broker for the proxy's own requests (lookups,
// partition metadata, schemas, health pings, topic-list watchers): the proxy's control plane
// towards brokers, beside the clients' own sessions. Request ids are the Control's own:
// callers' ids are replaced on the way out and callers put theirs back on the answer.
type Control struct {
	cfg    ControlConfig
	dials  singleflight.Group
	mu     sync.Mutex
	conns  map[string]*brokerConn // by slot key: host:port#n
	turn   atomic.Uint64
	closed bool

	refusals sync.Map // broker addr → the CONNECT refusal last logged by Ping

	watchersOffered atomic.Pointer[bool] // the last broker CONNECTED's supports_topic_watchers
}

// NewControl makes a Control without connections; they are dialled on first use.
func NewControl(cfg ControlConfig) *Control {
	return &Control{cfg: cfg, conns: map[string]*brokerConn{}}
}

// ErrControlClosed is returned after Close.
var ErrControlClosed = errors.New("lookup pool closed")

// ErrTooManyPending is returned when a broker connection has MaxPending requests in flight.
var ErrTooManyPending = errors.New("too many requests in flight to broker")

// RoundTrip sends cmd (which must carry a request_id field) to the broker at addr, over the
// control connection made for client, and waits for the answer with the same id. A client
// with a role gets a connection whose CONNECT names that role as original_principal, so the
// broker authorizes the request as the client, never as the proxy (with its credentials
// forwarded, one per credentials, closed when they expire). cmd is modified: its request_id
// becomes the Control's.
func (ctl *Control) RoundTrip(ctx context.Context, addr string, client Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	c, err := ctl.conn(ctx, addr, client)
	if err != nil {
		return nil, err
	}
	return c.roundTrip(ctx, cmd)
}

// Ping checks that the control connection to the broker at addr is up and answers a PING. A
// broker that answers the proxy's CONNECT with an error is up too: it refuses the proxy's
// own identity, not clients, whose connections carry their own (brokers that authenticate
// original_auth_data refuse an ownPrincipal that comes without credentials). The refusal is
// logged when it first appears or changes. client is whose connection is pinged (the zero
// Client: the proxy's own).
func (ctl *Control) Ping(ctx context.Context, addr string, client Client) error {
	c, err := ctl.conn(ctx, addr, client)
	var refused *BrokerError
	if errors.As(err, &refused) {
		if prev, _ := ctl.refusals.Swap(addr, refused.Error()); prev != refused.Error() {
			ctl.cfg.Logger.Warn().Str("broker", addr).Err(refused).
				Msg("broker refuses the proxy's own connection; it answers, so it counts as up (clients connect with their own credentials)")
		}
		return nil
	}
	if err != nil {
		return err
	}
	ctl.refusals.Delete(addr)
	return c.ping(ctx)
}

// Close closes every control connection and fails their waiters.
func (ctl *Control) Close() {
	ctl.mu.Lock()
	ctl.closed = true
	conns := ctl.conns
	ctl.conns = map[string]*brokerConn{}
	ctl.mu.Unlock()
	for _, c := range conns {
		c.close(ErrControlClosed)
	}
}

func (ctl *Control) conn(ctx context.Context, addr string, client Client) (*brokerConn, error) {
	principal := client.Principal
	var key string
	switch {
	case principal == "":
		// Requests take the broker's connections in turn, so one slow answer (a big
		// GET_TOPICS_OF_NAMESPACE) does not hold up every lookup behind it.
		key = fmt.Sprintf("%s#%d", addr, ctl.turn.Add(1)%uint64(max(ctl.cfg.ConnsPerBroker, 1)))
	case client.AuthData != nil:
		sum := sha256.Sum256(client.AuthData)
		key = addr + "@" + principal + "#" + hex.EncodeToString(sum[:8])
	default:
		key = addr + "@" + principal
	}
	ctl.mu.Lock()
	if ctl.closed {
		ctl.mu.Unlock()
		return nil, ErrControlClosed
	}
	if c := ctl.conns[key]; c != nil && !c.isClosed() {
		ctl.mu.Unlock()
		c.lastUsed.Store(time.Now().UnixNano())
		return c, nil
	}
	ctl.mu.Unlock()

	// One dial per slot however many lookups wait for it.
	v, err, _ := ctl.dials.Do(key, func() (any, error) {
		c, err := ctl.dial(addr, client)
		if err != nil {
			return nil, err
		}
		ctl.mu.Lock()
		defer ctl.mu.Unlock()
		if ctl.closed {
			c.close(ErrControlClosed)
			return nil, ErrControlClosed
		}
		if principal != "" {
			if err := ctl.evictLocked(); err != nil {
				c.close(err)
				return nil, err
			}
		}
		ctl.conns[key] = c
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return v.(*brokerConn), nil
}

// ErrTooManyPrincipals is returned for a new principal when MaxPrincipals connections carry
// topic-list watchers, which are not evicted.
var ErrTooManyPrincipals = errors.New("too many client roles hold pooled broker connections with topic-list watchers")

// evictLocked closes the least recently used per-principal connection when there are
// MaxPrincipals of them, so clients inventing roles cannot grow the connections without bound.
// Connections carrying topic-list watchers count but are not evicted (their clients would
// lose the watchers): when all are such, the new principal is refused.
func (ctl *Control) evictLocked() error {
	limit := ctl.cfg.MaxPrincipals
	if limit <= 0 {
		limit = 1000
	}
	var n int
	var oldestKey string
	var oldest int64
	for k, c := range ctl.conns {
		if c.client.Principal == "" {
			continue
		}
		n++
		if c.watching() {
			continue // clients' topic-list watchers would be lost with it
		}
		if t := c.lastUsed.Load(); oldestKey == "" || t < oldest {
			oldestKey, oldest = k, t
		}
	}
	switch {
	case n < limit:
	case oldestKey == "":
		return ErrTooManyPrincipals
	default:
		c := ctl.conns[oldestKey]
		delete(ctl.conns, oldestKey)
		c.close(errors.New("pooled connection evicted: too many principals"))
	}
	return nil
}

func (ctl *Control) dial(addr string, client Client) (*brokerConn, error) {
	bc, err := ctl.cfg.Connector.Open(context.Background(), addr, nil, nil, client)
	if err != nil {
		if CertificateRefused(err) {
			ctl.cfg.Logger.Warn().Err(err).Str("broker", addr).Msg("broker certificate refused; check broker.tls and the broker's certificate")
		}
		var refused *BrokerError
		var dialErr *DialError
		if errors.As(err, &refused) || errors.As(err, &dialErr) {
			return nil, err // names the broker already (the probe's reason in the log)
		}
		return nil, fmt.Errorf("connect to broker %s: %w", addr, err)
	}
	c := &brokerConn{
		addr:      addr,
		nc:        bc.Conn,
		pending:   map[uint64]chan *pb.BaseCommand{},
		max:       ctl.cfg.MaxPending,
		done:      make(chan struct{}),
		pongs:     make(chan struct{}, 1),
		log:       ctl.cfg.Logger.With().Str("broker", addr).Logger(),
		client:    client,
		connector: ctl.cfg.Connector,
	}
	c.lastUsed.Store(time.Now().UnixNano())
	ctl.topicWatchersOffered(bc.Connected)
	go c.readLoop(bc.Reader)
	if !client.Expires.IsZero() && client.AuthData != nil {
		// The broker would challenge for credentials the Control cannot renew: retire the
		// connection first; the client's next lookup brings its fresh credentials.
		c.retire = time.AfterFunc(time.Until(client.Expires), func() {
			c.close(errors.New("client credentials of this pooled connection expired"))
		})
	}
	return c, nil
}

// brokerConn is one control connection, proxy→broker.
type brokerConn struct {
	addr   string
	nc     net.Conn
	nextID atomic.Uint64
	max    int
	log    zerolog.Logger

	wmu sync.Mutex // one frame at a time on the wire

	mu      sync.Mutex
	pending map[uint64]chan *pb.BaseCommand
	err     error
	done    chan struct{}

	pingMu sync.Mutex // one ping in flight
	pongs  chan struct{}

	watchers map[uint64]TopicWatcher // topic-list watchers open on it, by their id here

	client    Client       // whom it looks up for; an empty Principal is the proxy itself
	retire    *time.Timer  // closes a connection carrying client credentials at their expiry
	connector *Connector   // answers the broker's credential challenges
	lastUsed  atomic.Int64 // unix nanoseconds, for eviction
}

func (c *brokerConn) roundTrip(ctx context.Context, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	id := c.nextID.Add(1)
	if !frame.SetRequestID(cmd, id) {
		return nil, fmt.Errorf("%v carries no request id", cmd.GetType())
	}
	ch := make(chan *pb.BaseCommand, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	if c.max > 0 && len(c.pending) >= c.max {
		c.mu.Unlock()
		return nil, ErrTooManyPending
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()

	if err := c.write(cmd); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-c.done:
		return nil, c.closeErr()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *brokerConn) ping(ctx context.Context) error {
	c.pingMu.Lock()
	defer c.pingMu.Unlock()
	select { // drop a stale pong from an earlier, timed-out ping
	case <-c.pongs:
	default:
	}
	if err := c.write(frame.Ping()); err != nil {
		return err
	}
	select {
	case <-c.pongs:
		return nil
	case <-c.done:
		return c.closeErr()
	case <-ctx.Done():
		// A broker that cannot answer a ping in time is not one to route lookups to.
		c.close(fmt.Errorf("broker %s did not answer ping: %w", c.addr, ctx.Err()))
		return ctx.Err()
	}
}

// controlWriteTimeout bounds a write on a control connection: a broker that takes nothing for
// that long is stuck, and its connection is closed rather than holding up its callers
// (lookups, a session's teardown closing its topic-list watchers).
const controlWriteTimeout = 10 * time.Second

func (c *brokerConn) write(cmd *pb.BaseCommand) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	if err := frame.WriteCommand(c.nc, cmd); err != nil {
		c.close(fmt.Errorf("write to broker %s: %w", c.addr, err))
		return c.closeErr()
	}
	return nil
}

func (c *brokerConn) readLoop(r *frame.Reader) {
	for {
		f, err := r.ReadFrame()
		if err != nil {
			c.close(fmt.Errorf("broker %s connection lost: %w", c.addr, err))
			return
		}
		cmd, err := frame.Decode(f.Command)
		if err != nil {
			c.close(fmt.Errorf("broker %s sent a bad frame: %w", c.addr, err))
			return
		}
		switch cmd.GetType() {
		case pb.BaseCommand_PING:
			if c.write(frame.Pong()) != nil {
				return
			}
		case pb.BaseCommand_PONG:
			select {
			case c.pongs <- struct{}{}:
			default:
			}
		case pb.BaseCommand_AUTH_CHALLENGE:
			// The broker wants the proxy's credentials again (its token is about to expire).
			if c.answerChallenge() != nil {
				return
			}
		case pb.BaseCommand_WATCH_TOPIC_UPDATE:
			c.topicUpdate(cmd.GetWatchTopicUpdate())
		default:
			id, ok := frame.RequestID(cmd)
			if !ok {
				c.log.Debug().Stringer("type", cmd.GetType()).Msg("ignoring broker command without request id")
				continue
			}
			c.mu.Lock()
			ch := c.pending[id]
			c.mu.Unlock()
			if ch != nil {
				select { // buffered 1: a duplicate answer is dropped, never waited on
				case ch <- cmd:
				default:
				}
			}
		}
	}
}

func (c *brokerConn) answerChallenge() error {
	resp, err := c.connector.AuthResponse(c.addr)
	if err != nil {
		c.close(err)
		return c.closeErr()
	}
	return c.write(resp)
}

func (c *brokerConn) close(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	c.nc.Close()
	if c.retire != nil {
		c.retire.Stop()
	}
	c.mu.Unlock()
	c.loseWatchers()
}

func (c *brokerConn) closeErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *brokerConn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
