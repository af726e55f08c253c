// Package proxy puts the proxy together from a validated configuration: it builds the parts
// (logger, metrics registry, discovery, the live broker set, the broker control connections
// and the multiplexed pool, security, the sessions server, the admin API proxy) with Build,
// and Run opens the listeners, serves and drains. cmd/pulsar-proxy keeps only what belongs to
// the process (flags, signals, exit codes), so that the wiring can be tested without starting
// one.
package proxy

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/adminproxy"
	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/discovery"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
	"github.com/pulsar-proxy/pulsar-proxy/session"
	"github.com/pulsar-proxy/pulsar-proxy/sni"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
	"github.com/pulsar-proxy/pulsar-proxy/websocket"
)

// Options are what Build takes from the process rather than from the configuration.
type Options struct {
	// Version is the proxy's version: in the startup line, pulsar_proxy_build_info, and the
	// server and client versions of its CONNECTED and CONNECT.
	Version string
	// LogOutput is where the log goes (in log.format); nil: standard error.
	LogOutput io.Writer
	// Reload, when the process has one, delivers its SIGHUPs: each reloads the authorization
	// policy at once (it is also reloaded every authz.reloadInterval when it changed). See
	// ReloadsOnSignal.
	Reload <-chan os.Signal
}

// Proxy is the parts of one proxy, as Build makes them from the configuration.
type Proxy struct {
	cfg       *config.Config
	version   string
	reload    <-chan os.Signal
	log       zerolog.Logger
	refusals  *refusal.Summary // the log's summaries of refused clients
	reg       *prometheus.Registry
	providers []discovery.Provider
	brokers   *brokers.Set
	control   *upstream.Control
	muxPool   *mux.Pool // nil without broker.multiplex
	sessions  *session.Server
	// The series with a broker label, made as brokers join the live set (brokerSeries).
	sessionMetrics *session.Metrics
	lookupMetrics  *lookup.Metrics
	sni            *sni.Server // nil without listen.pulsarSNI
	sec            session.Security
	policy         *authz.PolicyStore   // nil without authz.enabled
	jwks           *authn.JWKS          // nil without auth.token.jwksURL
	basic          *authn.BasicProvider // nil without auth.basic.credentialsFile
	brokerTLS      bool
	admin          *adminproxy.Proxy // nil without admin.enabled
	ws             *websocket.Server // nil without websocket.enabled
	listening      atomic.Bool       // the Pulsar listeners are serving (for /readyz)
	// The descriptor budget of client connections and each listener's part (https nil without
	// admin.listenHTTPS), and the HTTP listeners' metrics.
	budget                    *connlimit.Budget
	fdPulsar, fdHTTP, fdHTTPS *connlimit.Share
	fdSNI                     *connlimit.Share // nil without listen.pulsarSNI
	httpConns                 *connlimit.ListenerMetrics

	started chan struct{} // closed once Run serves on every listener
	mu      sync.Mutex
	addrs   Addrs
}

// Addrs are the addresses the listeners are bound to, as Run opened them (a port 0 of the
// configuration replaced by the one chosen). Pulsar, PulsarTLS, PulsarSNI, HTTPS and Pprof
// are empty without listen.pulsar (a TLS-only proxy), listen.pulsarTLS, listen.pulsarSNI,
// admin.listenHTTPS and listen.pprof.
type Addrs struct {
	Pulsar, PulsarTLS, PulsarSNI, HTTP, HTTPS, Pprof string
}

// Build makes every part of the proxy from cfg (which config.Load has validated): nothing
// listens or dials yet, and nothing runs but the multiplexed pool's idle reaper (with
// broker.multiplex), which Close stops. An error names the configuration key it comes from.
func Build(cfg *config.Config, o Options) (*Proxy, error) {
	log, summaryLevel, err := newLogger(cfg.Log, o.LogOutput)
	if err != nil {
		return nil, err
	}
	logSettings(cfg, Warnings(cfg), log)
	p := &Proxy{cfg: cfg, version: o.Version, reload: o.Reload, log: log, reg: prometheus.NewRegistry(), started: make(chan struct{}),
		refusals: refusal.New(log, cfg.Log.RefusalInterval)}
	if err := p.build(summaryLevel); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close releases what Build made and Run left open: the broker connections (the control
// connections and the multiplexed pool) and the admin API's idle ones. Call it after Run has
// returned.
func (p *Proxy) Close() {
	if p.control != nil {
		p.control.Close()
	}
	if p.muxPool != nil {
		p.muxPool.Close()
	}
	if p.admin != nil {
		p.admin.Close()
	}
}

// ReloadsOnSignal reports whether anything reloads on Options.Reload (the authorization
// policy, with authz.enabled). The process should catch SIGHUP only then, so that SIGHUP
// keeps its default otherwise. Certificates need no signal: they are reloaded when their
// files change.
func (p *Proxy) ReloadsOnSignal() bool { return p.policy != nil }

// Started is closed once Run has bound every listener and serves on them.
func (p *Proxy) Started() <-chan struct{} { return p.started }

// Addrs are the addresses Run bound; the zero Addrs before Started is closed.
func (p *Proxy) Addrs() Addrs {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addrs
}

// newLogger is the process's logger of log.*, and the level of the sessions' summary lines
// (zerolog.Disabled for log.sessionSummary off).
func newLogger(c config.Log, w io.Writer) (zerolog.Logger, zerolog.Level, error) {
	level, err := zerolog.ParseLevel(c.Level)
	if err != nil {
		return zerolog.Logger{}, 0, fmt.Errorf("log.level: %w", err)
	}
	summary := zerolog.Disabled
	if c.SessionSummary != "off" {
		if summary, err = zerolog.ParseLevel(c.SessionSummary); err != nil {
			return zerolog.Logger{}, 0, fmt.Errorf("log.sessionSummary: %w", err)
		}
	}
	if w == nil {
		w = os.Stderr
	}
	var out = zerolog.New(w)
	if c.Format == "console" {
		out = zerolog.New(zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339})
	}
	return out.Level(level).With().Timestamp().Logger(), summary, nil
}
