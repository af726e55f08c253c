package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/session"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
	"github.com/pulsar-proxy/pulsar-proxy/websocket"
)

// buildWebSocket makes the WebSocket plane (nil without websocket.enabled): sessions
// authenticated and decided as on the other planes, their producers and consumers made
// through the resolver's lookups on broker connections of their own.
func buildWebSocket(cfg *config.Config, connector *upstream.Connector, resolver *lookup.Resolver, set *brokers.Set,
	sec session.Security, reg prometheus.Registerer, log zerolog.Logger, refusals websocket.Refusals) *websocket.Server {
	w := cfg.WebSocket
	metrics := websocket.NewMetrics(reg)
	if !w.Enabled {
		return nil
	}
	clients := pulsarclient.NewFactory(pulsarclient.Config{
		Connector:        connector,
		Resolver:         resolver,
		Targets:          set,
		OperationTimeout: w.OperationTimeout,
		KeepAlive:        cfg.Session.KeepAliveInterval,
		MaxMessageSize:   int(cfg.Session.MaxMessageSize()),
		Logger:           log,
		Buffered:         metrics.Buffered(),
	})
	c := websocket.Config{
		Clients:                  clients,
		AuthFailures:             sec.Metrics,
		Refusals:                 refusals,
		Policy:                   sec.Edge,
		ForwardClientCredentials: sec.ForwardClientCredentials,
		MaxSessions:              w.MaxSessions,
		MaxMessageSize:           w.MaxTextMessageSize,
		IdleTimeout:              w.SessionIdleTimeout,
		PingInterval:             w.PingInterval,
		MaxPendingMessages:       w.MaxPendingMessages,
		MaxBufferedBytes:         w.MaxBufferedBytes,
		OriginPatterns:           w.AllowedOrigins,
		Location:                 time.Local,
		Logger:                   log,
		Metrics:                  metrics,
	}
	if sec.Authenticator != nil {
		c.Auth = sec.Authenticator
	}
	return websocket.New(c)
}
