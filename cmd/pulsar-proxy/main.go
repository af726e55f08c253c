// Command pulsar-proxy is a gateway in front of Apache Pulsar brokers. This file only wires
// the parts together; the behaviour lives in the packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/config"
	"github.com/pulsar-proxy/pulsar-proxy/httpapi"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/session"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// protocolVersion is the highest Pulsar protocol version the proxy speaks (v21: Pulsar 3.x/4.x).
const protocolVersion = 21

// maxPendingPerBrokerConn bounds the lookups in flight on one pooled broker connection; each
// client connection is bounded separately by session.maxPendingLookups.
const maxPendingPerBrokerConn = 10000

func main() {
	configPath := flag.String("config", "", "YAML configuration file (environment variables PULSAR_PROXY_* override it)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("pulsar-proxy", version)
		return
	}
	cfg, err := config.Load(*configPath, os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulsar-proxy:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "pulsar-proxy:", err)
		os.Exit(1)
	}
}

func run(cfg *config.Config) error {
	log, summaryLevel, err := newLogger(cfg.Log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	lookupMetrics := lookup.NewMetrics(reg)
	providers, err := discoveryProviders(cfg.Discovery, log, lookupMetrics)
	if err != nil {
		return err
	}
	var union lookup.Union
	var providerNames []string
	for _, p := range providers {
		union = append(union, p)
		providerNames = append(providerNames, p.Name())
	}
	allowedPorts := make([]string, len(cfg.Broker.AllowedPorts))
	for i, p := range cfg.Broker.AllowedPorts {
		allowedPorts[i] = strconv.Itoa(p)
	}
	brokers := lookup.NewBrokerSet(union, lookup.SetOptions{
		AllowedPorts: allowedPorts,
		AllowedHosts: cfg.Broker.AllowedHosts,
		LearnedTTL:   cfg.Broker.LearnedTargetLifetime,
		Logger:       log,
	})
	brokers.RegisterMetrics(reg)
	serverVersion := "pulsar-proxy/" + version
	sec, policy, jwks, err := newSecurity(cfg, reg, log)
	if err != nil {
		return err
	}
	dialer, err := brokerDialer(cfg, log)
	if err != nil {
		return err
	}
	creds, err := proxyCredentials(cfg)
	if err != nil {
		return err
	}
	connector := &upstream.Connector{
		Dialer:          dialer,
		Version:         serverVersion,
		ProtocolVersion: protocolVersion,
		Credentials:     creds,
		OwnPrincipal:    cfg.Auth.BrokerClient.OwnPrincipal,
		Timeout:         cfg.Broker.ConnectTimeout,
		MaxFrameSize:    cfg.Session.MaxFrameSize,
	}
	pool := upstream.NewPool(upstream.PoolConfig{
		Connector:      connector,
		MaxPending:     maxPendingPerBrokerConn,
		ConnsPerBroker: cfg.Broker.LookupConnectionsPerBroker,
		Logger:         log,
	})
	defer pool.Close()
	resolver := lookup.NewResolver(brokers, pool, cfg.Broker.LookupTimeout, cfg.Broker.MaxLookupRedirects, dialer.TLS != nil, lookupMetrics)

	sessions := session.NewServer(session.Config{
		ServerVersion:        serverVersion,
		ProtocolVersion:      protocolVersion,
		MaxFrameSize:         cfg.Session.MaxFrameSize,
		MaxMessageSize:       maxMessageSize(cfg.Session.MaxFrameSize),
		HandshakeTimeout:     cfg.Session.HandshakeTimeout,
		KeepAliveInterval:    cfg.Session.KeepAliveInterval,
		MaxPendingLookups:    cfg.Session.MaxPendingLookups,
		MaxConnections:       cfg.Session.MaxConnections,
		Upstream:             connector,
		SummaryLevel:         summaryLevel,
		MaxConnectionsPerIP:  cfg.Session.MaxConnectionsPerIP,
		Passthrough:          cfg.Session.Passthrough,
		ConnectionRatePerIP:  cfg.Session.ConnectionRatePerIP,
		ConnectionBurstPerIP: cfg.Session.ConnectionBurstPerIP,
		IPv6PrefixLength:     cfg.Session.IPv6PrefixLength,
	}, resolver, brokers, session.NewMetrics(reg), log)
	sessions.SetSecurity(sec)

	pulsarLn, tlsLn, err := clientListeners(cfg, reg, log)
	if err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", cfg.Listen.HTTP)
	if err != nil {
		pulsarLn.Close()
		if tlsLn != nil {
			tlsLn.Close()
		}
		return fmt.Errorf("listen.http: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	probeCtx, stopProbes := context.WithCancel(context.Background())
	defer stopProbes()
	for _, p := range providers {
		go p.Run(probeCtx)
	}
	go brokers.RunHealthChecks(probeCtx, pool.Ping, cfg.Discovery.HealthCheckInterval, cfg.Broker.ConnectTimeout)
	if jwks != nil {
		// In the background: a provider that is down must not keep the proxy from starting
		// (clients of other methods, and the readiness probe, do not depend on it).
		go jwks.Run(probeCtx)
	}
	if policy != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go policy.Watch(probeCtx, cfg.Authz.ReloadInterval, hup)
	}

	var listening atomic.Bool
	ready := func() (bool, string) {
		switch {
		case sessions.Draining():
			return false, "draining"
		case !listening.Load():
			return false, "pulsar listener not serving"
		}
		return brokers.Ready()
	}
	httpSrv := &http.Server{Handler: httpapi.Handler(reg, ready), ReadHeaderTimeout: 10 * time.Second}
	go httpSrv.Serve(httpLn)
	if cfg.Listen.Pprof != "" {
		pprofLn, err := net.Listen("tcp", cfg.Listen.Pprof)
		if err != nil {
			return fmt.Errorf("listen.pprof: %w", err)
		}
		pprofSrv := &http.Server{Handler: httpapi.Pprof(), ReadHeaderTimeout: 10 * time.Second}
		defer pprofSrv.Close()
		go pprofSrv.Serve(pprofLn)
	}

	serveErr := make(chan error, 2)
	listening.Store(true)
	go func() { serveErr <- sessions.Serve(pulsarLn) }()
	started := log.Info().Str("pulsar", pulsarLn.Addr().String())
	if tlsLn != nil {
		go func() { serveErr <- sessions.Serve(tlsLn) }()
		started = started.Str("pulsar_tls", tlsLn.Addr().String())
	}
	started.Str("http", httpLn.Addr().String()).
		Strs("discovery", providerNames).Str("version", version).
		Str("forwarding", forwarding(cfg, sec)).Bool("broker_tls", dialer.TLS != nil).
		Str("broker_proxy_protocol", cfg.Broker.BrokerProxyProtocol).
		Bool("authentication", sec.Authenticator != nil).Bool("authorization", sec.Policy != nil).
		Msg("pulsar-proxy started")

	select {
	case <-ctx.Done():
		log.Info().Dur("drain_timeout", cfg.Session.DrainTimeout).Msg("stopping: draining sessions")
	case err := <-serveErr:
		listening.Store(false)
		return fmt.Errorf("pulsar listener: %w", err)
	}
	listening.Store(false)
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.Session.DrainTimeout)
	defer cancel()
	drainBegan := time.Now()
	switch err := sessions.Shutdown(drainCtx); {
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn().Dur("drain_timeout", cfg.Session.DrainTimeout).Msg("sessions still open at the drain deadline were closed")
	case err != nil:
		log.Warn().Err(err).Msg("drain")
	default:
		log.Info().Dur("took", time.Since(drainBegan)).Msg("every session handed over")
	}
	shutdownCtx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	httpSrv.Shutdown(shutdownCtx)
	log.Info().Msg("pulsar-proxy stopped")
	return nil
}

// forwarding names how direct sessions move bytes, for the startup line: passthrough
// (socket to socket, see session.passthrough) needs nothing to inspect the frames.
func forwarding(cfg *config.Config, sec session.Security) string {
	if cfg.Session.Passthrough && !sec.InspectsFrames() {
		return "passthrough (plaintext TCP on both sides; framed otherwise)"
	}
	return "framed"
}

// discoveryProviders builds every configured provider; config validation has already made
// sure there is at least one.
func discoveryProviders(c config.Discovery, log zerolog.Logger, m *lookup.Metrics) ([]lookup.Provider, error) {
	var ps []lookup.Provider
	if len(c.Static.Brokers) > 0 {
		s, err := lookup.NewStatic(c.Static.Brokers)
		if err != nil {
			return nil, fmt.Errorf("discovery.static.brokers: %w", err)
		}
		ps = append(ps, s)
	}
	if c.Consul.ConsulService != "" {
		cp, err := lookup.NewConsul(lookup.ConsulConfig{
			Service:    c.Consul.ConsulService,
			Tag:        c.Consul.ConsulTag,
			Datacenter: c.Consul.ConsulDatacenter,
			Address:    c.Consul.ConsulAddress,
			Token:      c.Consul.ConsulToken,
			WaitTime:   c.Consul.ConsulWaitTime,
		}, log, m)
		if err != nil {
			return nil, fmt.Errorf("discovery.consul: %w", err)
		}
		ps = append(ps, cp)
	}
	if c.DNS.DNSName != "" {
		dp, err := lookup.NewDNS(lookup.DNSConfig{
			Name:     c.DNS.DNSName,
			SRV:      c.DNS.DNSRecord == "SRV",
			Port:     c.DNS.DNSPort,
			Server:   c.DNS.DNSServer,
			Interval: c.DNS.DNSRefreshInterval,
		}, log, m)
		if err != nil {
			return nil, fmt.Errorf("discovery.dns: %w", err)
		}
		ps = append(ps, dp)
	}
	return ps, nil
}

// maxMessageSize is what clients are told they may send: the frame limit less the 10 KiB
// that Pulsar clients reserve for the command and metadata around a message.
func maxMessageSize(maxFrameSize int) int32 {
	const padding = 10 << 10
	if maxFrameSize > 2*padding {
		return int32(maxFrameSize - padding)
	}
	return int32(maxFrameSize / 2)
}

func newLogger(c config.Log) (zerolog.Logger, zerolog.Level, error) {
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
	var out = zerolog.New(os.Stderr)
	if c.Format == "console" {
		out = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.RFC3339})
	}
	return out.Level(level).With().Timestamp().Logger(), summary, nil
}
