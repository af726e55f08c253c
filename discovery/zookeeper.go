package discovery

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/zkaddr"
)

// ZooKeeperConfig says which ZooKeeper holds the brokers' registrations.
type ZooKeeperConfig struct {
	Servers []string // host:port
	Chroot  string   // the path Pulsar's metadataStoreUrl ends with ("" or /path)
	// SessionTimeout is asked of the server (it clamps it to 2–20 ticks).
	SessionTimeout time.Duration
	// Digest is user:password for ZooKeeper's digest scheme; "" for none.
	Digest string
	// TLS, when set, dials every server over TLS (ZooKeeper's secureClientPort).
	TLS *tls.Config
	// BrokerTLS takes the brokers' TLS URLs (pulsarServiceUrlTls, webServiceUrlTls).
	BrokerTLS bool
	// Listener takes an advertised listener's broker URL instead of the default one.
	Listener string
	// retryMin and retryMax bound the backoff after a failed read.
	retryMin, retryMax time.Duration
	// confirmEvery is how often an open session with an armed watch counts as a success
	// (last_success_timestamp), as a Consul watch that held does.
	confirmEvery time.Duration
}

// zkConn is the part of *zk.Conn the provider uses (a fake in unit tests).
type zkConn interface {
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Get(path string) ([]byte, *zk.Stat, error)
	ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error)
	AddAuth(scheme string, auth []byte) error
	Close()
}

// zkDialer opens a session; onSession is called, without blocking, with every session state.
type zkDialer func(onSession func(zk.State)) (zkConn, error)

// ZooKeeper lists the brokers registered under /loadbalance/brokers in Pulsar's metadata
// store. It keeps a child watch armed (re-armed after each change and each new session), so
// a broker that starts or whose session ends is seen within one notification; nothing polls.
// While the session is disconnected the last list is kept and reported stale; the client
// reconnects by itself, and after a session expiry it opens a new one.
type ZooKeeper struct {
	*source
	cfg    ZooKeeperConfig
	dial   zkDialer
	path   string
	choice zkBrokerChoice

	kick     chan struct{} // a session event arrived
	state    atomic.Int32  // the last zk.State seen
	sessions atomic.Int64  // sessions established (a new one or the same one reconnected)
	attempts atomic.Int64  // connection attempts since the last session was established
}

// NewZooKeeper builds the provider; nothing is dialled until Run.
func NewZooKeeper(cfg ZooKeeperConfig, log zerolog.Logger, m *Metrics) (*ZooKeeper, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("zookeeper discovery needs at least one server")
	}
	if err := zkaddr.CheckChroot(cfg.Chroot); err != nil {
		return nil, err
	}
	if cfg.Digest != "" && !strings.Contains(cfg.Digest, ":") {
		return nil, fmt.Errorf("zookeeper digest auth: want user:password")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 30 * time.Second
	}
	if cfg.retryMin <= 0 {
		cfg.retryMin = 500 * time.Millisecond
	}
	if cfg.retryMax < cfg.retryMin {
		cfg.retryMax = max(10*time.Second, cfg.retryMin)
	}
	if cfg.confirmEvery <= 0 {
		cfg.confirmEvery = 10 * time.Second
	}
	z := &ZooKeeper{
		source: newSource("metadataStore", log, m),
		cfg:    cfg,
		path:   strings.TrimSuffix(cfg.Chroot, "/") + zkBrokersPath,
		choice: zkBrokerChoice{TLS: cfg.BrokerTLS, Listener: cfg.Listener},
		kick:   make(chan struct{}, 1),
	}
	z.state.Store(int32(zk.StateDisconnected))
	z.dial = z.connect
	return z, nil
}

// connect opens the real client, whose own goroutines reconnect until Close.
func (z *ZooKeeper) connect(onSession func(zk.State)) (zkConn, error) {
	dialer := zk.Dialer(net.DialTimeout)
	if z.cfg.TLS != nil {
		dialer = tlsDialer(z.cfg.TLS)
	}
	// The event channel Connect returns drops events when full; the callback sees them all.
	c, _, err := zk.Connect(z.cfg.Servers, z.cfg.SessionTimeout,
		zk.WithLogger(zkLogger{z.log}),
		zk.WithDialer(dialer),
		zk.WithHostProvider(&zkHosts{}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession {
				onSession(ev.State)
			}
		}))
	return c, err
}

// onSession records a session state from the client's goroutines and wakes Run.
func (z *ZooKeeper) onSession(s zk.State) {
	switch s {
	case zk.StateHasSession:
		z.sessions.Add(1)
		z.attempts.Store(0)
	case zk.StateConnecting:
		z.attempts.Add(1)
	}
	z.state.Store(int32(s))
	select {
	case z.kick <- struct{}{}:
	default:
	}
}

// Run follows the registrations until ctx ends.
func (z *ZooKeeper) Run(ctx context.Context) {
	retry := backoff{min: z.cfg.retryMin, max: z.cfg.retryMax}
	var conn zkConn
	for conn == nil {
		c, err := z.dial(z.onSession)
		if err != nil {
			z.fail(fmt.Errorf("zookeeper %v: %w", z.cfg.Servers, err))
			if !sleep(ctx, retry.next()) {
				return
			}
			continue
		}
		conn = c
	}
	defer conn.Close()
	z.follow(ctx, conn, &retry)
}

// zkLoop is the state of one follow loop: what is armed and what is owed.
type zkLoop struct {
	watch     <-chan zk.Event // the armed child (or existence) watch; nil when none
	sessions  int64           // the sessions count the last read was made in
	authed    bool
	connected bool
	reported  bool             // the current outage was reported (once per outage)
	retry     <-chan time.Time // a failed read's retry; nil when none
}

// follow reacts to session changes, watch notifications and retries until ctx ends.
func (z *ZooKeeper) follow(ctx context.Context, conn zkConn, retry *backoff) {
	confirm := time.NewTicker(z.cfg.confirmEvery)
	defer confirm.Stop()
	var l zkLoop
	for {
		owed := false
		select {
		case <-ctx.Done():
			return
		case <-z.kick:
		case <-l.watch:
			l.watch, owed = nil, true
		case <-l.retry:
			l.retry, owed = nil, true
		case <-confirm.C:
			if l.connected && l.watch != nil {
				z.confirm()
			}
			continue
		}
		z.sessionChanged(&l)
		if !l.connected {
			continue
		}
		if s := z.sessions.Load(); s != l.sessions {
			l.sessions, owed = s, true // a new or resumed session: changes may have been missed
		}
		if owed {
			z.refresh(conn, &l, retry)
		}
	}
}

// sessionChanged marks the list stale when the session is lost, the moment it is.
func (z *ZooKeeper) sessionChanged(l *zkLoop) {
	st := zk.State(z.state.Load())
	up := st == zk.StateHasSession
	// Connecting is also the normal first step: only a second attempt means one failed.
	trying := (st == zk.StateConnecting || st == zk.StateConnected) && z.attempts.Load() < 2
	if !up && !l.reported && (l.connected || !trying) {
		if l.connected {
			z.confirm() // the watch held until now
		}
		z.fail(fmt.Errorf("zookeeper %v: session not connected (%s)", z.cfg.Servers, strings.TrimPrefix(st.String(), "State")))
		l.reported = true
	}
	if up {
		l.reported = false
	}
	l.connected = up
}

// refresh reads the brokers and re-arms the watch; a failure is retried with backoff.
func (z *ZooKeeper) refresh(conn zkConn, l *zkLoop, retry *backoff) {
	// Credentials are added once; the client sends them again on every later connection.
	if z.cfg.Digest != "" && !l.authed {
		if err := conn.AddAuth("digest", []byte(z.cfg.Digest)); err != nil {
			z.fail(fmt.Errorf("zookeeper digest auth: %w", err))
			l.retry = time.After(retry.next())
			return
		}
		l.authed = true
	}
	found, watch, err := z.read(conn)
	if err != nil {
		z.fail(err)
		l.retry = time.After(retry.next())
		return
	}
	retry.reset()
	l.watch = watch
	if found != nil {
		z.succeed(found)
	}
}

// errNoBrokersPath is a metadata store where no broker registered yet (or the wrong chroot).
var errNoBrokersPath = errors.New("does not exist (no broker registered yet, or the wrong chroot?)")

// read lists the registered brokers and arms a child watch. When the path does not exist it
// arms an existence watch instead and reports that as a failure (the list is kept).
func (z *ZooKeeper) read(conn zkConn) ([]brokers.Broker, <-chan zk.Event, error) {
	children, _, watch, err := conn.ChildrenW(z.path)
	if errors.Is(err, zk.ErrNoNode) {
		exists, _, ew, eerr := conn.ExistsW(z.path)
		if eerr != nil {
			return nil, nil, fmt.Errorf("zookeeper %s: %w", z.path, eerr)
		}
		if exists { // created in between: read again at once
			return z.read(conn)
		}
		z.fail(fmt.Errorf("zookeeper %s %w", z.path, errNoBrokersPath))
		return nil, ew, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("zookeeper list %s: %w", z.path, err)
	}
	var out []brokers.Broker
	for _, name := range children {
		data, _, err := conn.Get(z.path + "/" + name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // gone since the listing; its watch event follows
		}
		if err != nil {
			return nil, nil, fmt.Errorf("zookeeper read %s/%s: %w", z.path, name, err)
		}
		b, err := parseZKBroker(data, z.choice)
		if err != nil {
			z.log.Warn().Err(err).Str("broker", name).Msg("skipping a broker registration that names no usable broker")
			continue
		}
		out = append(out, b)
	}
	if out == nil {
		out = []brokers.Broker{} // an empty answer: succeed counts it as a failure
	}
	return out, watch, nil
}

// zkLogger sends the client's own messages (connects, reconnects) to the debug log.
type zkLogger struct{ log zerolog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug().Msgf("zookeeper client: "+format, args...)
}
