package config

import (
	"path"
	"time"
)

// WebSocket is Pulsar's WebSocket API on the HTTP listeners (listen.http and
// admin.listenHTTPS): producers, consumers and readers at /ws/v2/... (and the v1 paths),
// which the proxy makes at brokers itself over the binary protocol.
type WebSocket struct {
	Enabled bool `yaml:"enabled" env:"ENABLED"`
	// MaxSessions bounds the sessions open at once; more are answered 503.
	MaxSessions int `yaml:"maxSessions" env:"MAX_SESSIONS"`
	// MaxTextMessageSize is the largest message a client may send (Pulsar's
	// webSocketMaxTextFrameSize); a larger one closes its session (1009).
	MaxTextMessageSize int64 `yaml:"maxTextMessageSize" env:"MAX_TEXT_MESSAGE_SIZE"`
	// SessionIdleTimeout closes a session without a frame either way for this long (1001),
	// as Pulsar's webSocketSessionIdleTimeoutMillis; 0: never.
	SessionIdleTimeout time.Duration `yaml:"sessionIdleTimeout" env:"SESSION_IDLE_TIMEOUT"`
	// PingInterval sends the client a ping this often (webSocketPingDurationSeconds); 0: none.
	PingInterval time.Duration `yaml:"pingInterval" env:"PING_INTERVAL"`
	// MaxPendingMessages bounds a producer session's messages in flight (the proxy stops
	// reading the client beyond it).
	MaxPendingMessages int `yaml:"maxPendingMessages" env:"MAX_PENDING_MESSAGES"`
	// MaxBufferedBytes bounds the payload bytes one session holds: a producer's in flight,
	// a consumer's received ahead of its client.
	MaxBufferedBytes int `yaml:"maxBufferedBytes" env:"MAX_BUFFERED_BYTES"`
	// AllowedOrigins are the browser origins allowed to open sessions (host[:port] patterns
	// of path.Match, e.g. "*.example.com"); empty: any, as Pulsar's service allows.
	AllowedOrigins []string `yaml:"allowedOrigins" env:"ALLOWED_ORIGINS"`
	// OperationTimeout bounds a session's lookup and its producer's or consumer's creation
	// at the brokers.
	OperationTimeout time.Duration `yaml:"operationTimeout" env:"OPERATION_TIMEOUT"`
}

func webSocketDefaults() WebSocket {
	return WebSocket{
		MaxSessions:        10000,
		MaxTextMessageSize: 1 << 20,
		SessionIdleTimeout: 5 * time.Minute,
		MaxPendingMessages: 1000,
		MaxBufferedBytes:   16 << 20,
		AllowedOrigins:     []string{},
		OperationTimeout:   30 * time.Second,
	}
}

func (c *Config) validateWebSocket(p *problems) {
	w := c.WebSocket
	p.between("websocket.maxSessions", w.MaxSessions, 1, 1_000_000)
	if w.MaxTextMessageSize < 1<<10 || w.MaxTextMessageSize > 64<<20 {
		p.bad("websocket.maxTextMessageSize", "must be between 1 KiB and 64 MiB, got %d", w.MaxTextMessageSize)
	}
	if w.SessionIdleTimeout < 0 {
		p.bad("websocket.sessionIdleTimeout", "must be 0 (never) or greater, got %s", w.SessionIdleTimeout)
	}
	if w.PingInterval < 0 {
		p.bad("websocket.pingInterval", "must be 0 (no pings) or greater, got %s", w.PingInterval)
	}
	p.between("websocket.maxPendingMessages", w.MaxPendingMessages, 1, 100_000)
	if w.MaxBufferedBytes < 64<<10 {
		p.bad("websocket.maxBufferedBytes", "must be at least 65536, got %d", w.MaxBufferedBytes)
	}
	p.positive("websocket.operationTimeout", w.OperationTimeout)
	for i, o := range w.AllowedOrigins {
		if _, err := path.Match(o, ""); err != nil || o == "" {
			p.bad("websocket.allowedOrigins", "[%d] %q is not a pattern of host[:port]", i, o)
		}
	}
}
