package mux

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Config is how the pool shares broker connections.
type Config struct {
	Connector *upstream.Connector
	// MaxConnections bounds the connections per broker and principal (broker.multiplexConnections).
	MaxConnections int
	// ClientsPerConnection: a new connection is opened (up to MaxConnections) only when every
	// open one has this many clients.
	ClientsPerConnection int
	// ClientQueueBytes bounds each client's outbound queue (what the brokers sent it that it
	// has not read yet), in the memory its frames hold (see Frame.held); over it the client is
	// disconnected as a slow consumer.
	ClientQueueBytes int
	// Linger is how long a connection without clients stays open for the next one.
	Linger  time.Duration
	Logger  zerolog.Logger
	Metrics *Metrics
}

// Key is what clients must share to share a connection: the broker and the principal the
// connection's CONNECT names (original_principal), so a broker authorizes each client's
// commands as that client.
type Key struct {
	Addr      string
	Principal string
}

// Pool holds the multiplexed broker connections.
type Pool struct {
	cfg     Config
	metrics *Metrics
	dials   singleflight.Group
	mu      sync.Mutex
	conns   map[Key][]*Conn
	closed  bool
	stop    chan struct{}
	bufs    bufPool // the frames' buffers, for all the pool's connections
}

// NewPool makes an empty pool; connections are dialled as clients arrive.
func NewPool(cfg Config) *Pool {
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 1
	}
	if cfg.ClientsPerConnection <= 0 {
		cfg.ClientsPerConnection = 1000
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	p := &Pool{cfg: cfg, metrics: cfg.Metrics, conns: map[Key][]*Conn{}, stop: make(chan struct{})}
	cfg.Metrics.observe(p)
	go p.reapIdle()
	return p
}

// ClientQueueBytes is the bound of each client's outbound queue.
func (p *Pool) ClientQueueBytes() int { return p.cfg.ClientQueueBytes }

// Attach puts a client on a connection to key.Addr for key.Principal: the least loaded one,
// or a new one when all have ClientsPerConnection clients and the bound allows. Errors are
// upstream.Connector's (*upstream.DialError, *upstream.BrokerError, ...).
func (p *Pool) Attach(ctx context.Context, key Key, h Handler) (*Member, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrLost
		}
		best, n := p.leastLoaded(key)
		if best != nil && (best.load() < p.cfg.ClientsPerConnection || n >= p.cfg.MaxConnections) {
			best.mu.Lock()
			if !best.dead {
				mb := best.attach(h)
				best.mu.Unlock()
				p.mu.Unlock()
				return mb, nil
			}
			best.mu.Unlock()
		}
		p.mu.Unlock()
		if _, err, _ := p.dials.Do(key.Addr+"\x00"+key.Principal, func() (any, error) { return nil, p.dial(ctx, key) }); err != nil {
			return nil, err
		}
	}
}

// leastLoaded is the live connection to key with the fewest clients, and how many there are.
func (p *Pool) leastLoaded(key Key) (*Conn, int) {
	var best *Conn
	bestLoad, n := 0, 0
	for _, c := range p.conns[key] {
		l := c.load()
		if l < 0 {
			continue
		}
		n++
		if best == nil || l < bestLoad {
			best, bestLoad = c, l
		}
	}
	return best, n
}

// hello is the pooled connection's CONNECT: the proxy's own version, and the features the
// proxy handles for every client. Partial producers stay off (a client that did not ask for
// them would take a not-ready producer for a ready one), and so does broker entry metadata.
func (p *Pool) hello() *upstream.Hello {
	c := p.cfg.Connector
	return &upstream.Hello{ClientVersion: c.Version, ProtocolVersion: c.ProtocolVersion, FeatureFlags: &pb.FeatureFlags{
		SupportsAuthRefresh: proto.Bool(true), SupportsTopicWatchers: proto.Bool(true),
		SupportsGetPartitionedMetadataWithoutAutoCreation: proto.Bool(true),
	}}
}

func (p *Pool) dial(ctx context.Context, key Key) error {
	began := time.Now()
	uc, err := p.cfg.Connector.Open(ctx, key.Addr, nil, p.hello(), upstream.Client{Principal: key.Principal})
	if err != nil {
		p.metrics.dials.WithLabelValues("error").Inc()
		return err
	}
	p.metrics.dials.WithLabelValues("ok").Inc()
	p.metrics.dialSeconds.Observe(time.Since(began).Seconds())
	c := newConn(p, key, uc)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		go c.fail(ErrLost)
		return ErrLost
	}
	p.conns[key] = append(p.conns[key], c)
	p.cfg.Logger.Debug().Str("broker", key.Addr).Str("principal", key.Principal).Int("connections", len(p.conns[key])).Msg("multiplexed broker connection opened")
	return nil
}

// remove forgets a failed connection.
func (p *Pool) remove(c *Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.conns[c.key]
	for i, x := range list {
		if x == c {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.conns, c.key)
	} else {
		p.conns[c.key] = list
	}
}

// reapIdle closes connections that had no client for Linger.
func (p *Pool) reapIdle() {
	every := max(p.cfg.Linger/4, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		for _, c := range p.all() {
			if idle := c.idleSince(); !idle.IsZero() && time.Since(idle) >= p.cfg.Linger {
				c.closeIfIdle()
			}
		}
	}
}

func (p *Pool) all() []*Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*Conn
	for _, list := range p.conns {
		out = append(out, list...)
	}
	return out
}

// Close closes every connection; their clients are told they lost them.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stop)
	p.mu.Unlock()
	for _, c := range p.all() {
		c.fail(ErrLost)
	}
}
