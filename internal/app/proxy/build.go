package proxy

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/discovery"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/httpapi"
	"github.com/pulsar-proxy/pulsar-proxy/internal/zkaddr"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
	"github.com/pulsar-proxy/pulsar-proxy/session"
	"github.com/pulsar-proxy/pulsar-proxy/sni"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Each HTTP listener may hold at most an eighth of the descriptor budget, so that a flood on
// the admin plane always leaves the Pulsar listeners three quarters of it; and up to 64
// connections are kept for each (probes, scrapes, an operator's admin calls) that a flood on
// the Pulsar listeners cannot take.
const (
	httpBudgetDivisor = 8
	httpBudgetFloor   = 64
)

// A multiplexed broker connection takes this many clients before another one is opened (up
// to broker.multiplexConnections), and stays open this long after its last client left.
const (
	clientsPerMuxConnection = 1000
	muxLinger               = time.Minute
)

// protocolVersion is the highest Pulsar protocol version the proxy speaks (v21: Pulsar 3.x/4.x).
const protocolVersion = 21

// maxPendingPerBrokerConn bounds the lookups in flight on one broker control connection; each
// client connection is bounded separately by session.maxPendingLookups.
const maxPendingPerBrokerConn = 10000

// buildPool makes the pool of shared broker connections and gives it to the sessions that use
// it: multiplexed direct sessions (broker.multiplex) and routed sessions (the clients of HTTP
// lookups). A routed client speaks for itself only with its role, so with
// auth.forwardClientCredentials there are none.
func (p *Proxy) buildPool(connector *upstream.Connector, sc *session.Config) {
	cfg := p.cfg
	// Registered with multiplexing off too (all zero), so that the dashboard's panels and
	// queries hold whichever way a replica runs.
	muxMetrics := mux.NewMetrics(p.reg)
	if !cfg.Broker.Multiplex && cfg.Auth.ForwardClientCredentials {
		return
	}
	p.muxPool = mux.NewPool(mux.Config{
		Connector:            connector,
		MaxConnections:       cfg.Broker.MultiplexConnections,
		ClientsPerConnection: clientsPerMuxConnection,
		ClientQueueBytes:     cfg.Broker.MultiplexClientQueueBytes,
		Linger:               muxLinger,
		Logger:               p.log,
		Metrics:              muxMetrics,
	})
	if cfg.Broker.Multiplex {
		sc.Multiplex = p.muxPool
	}
	if !cfg.Auth.ForwardClientCredentials {
		sc.Routed = p.muxPool
	}
}

// build makes every part of the proxy but the logger (see Build).
func (p *Proxy) build(summaryLevel zerolog.Level) error {
	cfg, log := p.cfg, p.log
	p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	discoveryMetrics := discovery.NewMetrics(p.reg)
	p.lookupMetrics = lookup.NewMetrics(p.reg)
	var err error
	if p.providers, err = discoveryProviders(cfg.Discovery, cfg.Broker.TLS.Enabled, log, discoveryMetrics); err != nil {
		return err
	}
	p.brokers = newLiveSet(cfg.Broker, cfg.SNI.ServiceNames, p.providers, log)
	p.brokers.RegisterMetrics(p.reg)
	var bg reloading
	if p.sec, p.policy, bg, err = newSecurity(cfg, p.reg, log, p.refusals); err != nil {
		return err
	}
	p.jwks, p.basic = bg.jwks, bg.basic
	connector, err := newConnector(cfg, p.version, log)
	if err != nil {
		return err
	}
	p.brokerTLS = connector.Dialer.TLS != nil
	p.control = upstream.NewControl(upstream.ControlConfig{
		Connector:      connector,
		MaxPending:     maxPendingPerBrokerConn,
		ConnsPerBroker: cfg.Broker.LookupConnectionsPerBroker,
		Logger:         log,
	})
	resolver := lookup.NewResolver(p.brokers, p.control, cfg.Broker.LookupTimeout, cfg.Broker.MaxLookupRedirects, p.brokerTLS, p.lookupMetrics)
	p.budgetShares()
	sc := sessionConfig(cfg, connector, p.version, summaryLevel)
	sc.Descriptors, sc.Refusals = p.fdPulsar, p.refusals
	p.buildPool(connector, &sc)
	p.sessionMetrics = session.NewMetrics(p.reg)
	p.sessions = session.NewServer(sc, resolver, p.brokers, p.sessionMetrics, log)
	p.sessions.SetSecurity(p.sec)
	httpapi.RegisterStatus(p.reg, p.version, p.ready, p.sessions.Draining)
	if p.sni, err = p.buildSNI(summaryLevel); err != nil {
		return err
	}
	p.admin, err = buildAdmin(cfg, p.brokers, p.sec, connector.Credentials, p.advertise, p.reg, log, p.refusals)
	p.ws = buildWebSocket(cfg, connector, resolver, p.brokers, p.sec, p.reg, log, p.refusals, p.sessionMetrics.PublishPaused())
	return err
}

// buildSNI makes the SNI plane of listen.pulsarSNI (nil without it); its series are
// registered either way, so the dashboard's queries hold whichever way a replica runs.
func (p *Proxy) buildSNI(summaryLevel zerolog.Level) (*sni.Server, error) {
	metrics := sni.NewMetrics(p.reg)
	cfg := p.cfg
	if cfg.Listen.PulsarSNI == "" {
		return nil, nil
	}
	s := cfg.Session
	srv, err := sni.NewServer(sni.Config{
		Targets:          p.brokers,
		Gate:             p.sec.Edge,
		Dialer:           &upstream.Dialer{Timeout: cfg.Broker.DialTimeout, ProxyHeader: cfg.SNI.ProxyHeaderVersion()},
		Proxy:            proxyOptions(cfg),
		HandshakeTimeout: s.HandshakeTimeout,
		MaxHelloBytes:    cfg.SNI.MaxClientHelloBytes,
		Limits: connlimit.Limits{MaxConnections: s.MaxConnections, MaxPerIP: s.MaxConnectionsPerIP,
			RatePerIP: s.ConnectionRatePerIP, BurstPerIP: s.ConnectionBurstPerIP, IPv6PrefixLength: s.IPv6PrefixLength},
		Descriptors:  p.fdSNI,
		SummaryLevel: summaryLevel,
		Log:          p.log,
		Metrics:      metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("listen.pulsarSNI: %w", err)
	}
	return srv, nil
}

func serverVersion(version string) string { return "pulsar-proxy/" + version }

// budgetShares makes the descriptor budget of session.descriptorReserve and gives each
// listener its part: the Pulsar listeners all of it but the HTTP listeners' floors.
func (p *Proxy) budgetShares() {
	p.budget = connlimit.NewBudget(connlimit.OpenFilesLimit(), uint64(p.cfg.Session.DescriptorReserve), connlimit.NewBudgetMetrics(p.reg))
	httpCeiling := p.budget.Descriptors() / httpBudgetDivisor
	p.fdPulsar = p.budget.Share("pulsar", 0, 0)
	p.fdHTTP = p.budget.Share("http", httpBudgetFloor*connlimit.HTTPDescriptors, httpCeiling)
	if p.cfg.Admin.ListenHTTPS != "" {
		p.fdHTTPS = p.budget.Share("https", httpBudgetFloor*connlimit.HTTPDescriptors, httpCeiling)
	}
	if p.cfg.Listen.PulsarSNI != "" {
		p.fdSNI = p.budget.Share("sni", 0, 0) // like the Pulsar listeners': two a connection
	}
	p.httpConns = connlimit.NewListenerMetrics(p.reg)
}

// newConnector is how the proxy opens a broker connection and sends its CONNECT: broker.tls,
// broker.proxyProtocol, the proxy's credentials and own principal (also check-config --connect).
func newConnector(cfg *config.Config, version string, log zerolog.Logger) (*upstream.Connector, error) {
	dialer, err := brokerDialer(cfg, log)
	if err != nil {
		return nil, err
	}
	creds, err := proxyCredentials(cfg)
	if err != nil {
		return nil, err
	}
	return &upstream.Connector{
		Dialer:          dialer,
		Version:         serverVersion(version),
		ProtocolVersion: protocolVersion,
		Credentials:     creds,
		OwnPrincipal:    cfg.Auth.BrokerClient.OwnPrincipal,
		Timeout:         cfg.Broker.ConnectTimeout,
		MaxFrameSize:    cfg.Session.MaxFrameSize,
	}, nil
}

func sessionConfig(cfg *config.Config, connector *upstream.Connector, version string, summaryLevel zerolog.Level) session.Config {
	s := cfg.Session
	return session.Config{
		ServerVersion:        serverVersion(version),
		ProtocolVersion:      protocolVersion,
		MaxFrameSize:         s.MaxFrameSize,
		MaxMessageSize:       s.MaxMessageSize(),
		HandshakeTimeout:     s.HandshakeTimeout,
		KeepAliveInterval:    s.KeepAliveInterval,
		MaxPendingLookups:    s.MaxPendingLookups,
		MaxLookupsInFlight:   s.MaxLookupsInFlight,
		StallTimeout:         s.StallTimeout,
		MaxConnections:       s.MaxConnections,
		Upstream:             connector,
		SummaryLevel:         summaryLevel,
		MaxConnectionsPerIP:  s.MaxConnectionsPerIP,
		Passthrough:          s.Passthrough,
		ConnectionRatePerIP:  s.ConnectionRatePerIP,
		ConnectionBurstPerIP: s.ConnectionBurstPerIP,
		IPv6PrefixLength:     s.IPv6PrefixLength,
	}
}

// newLiveSet is the live broker set over the union of the providers, with the
// direct-mode target rule and the web rule of broker.*.
func newLiveSet(b config.Broker, sniNames []string, providers []discovery.Provider, log zerolog.Logger) *brokers.Set {
	var union discovery.Union
	for _, p := range providers {
		union = append(union, p)
	}
	return brokers.NewSet(union, brokers.Options{
		AllowedPorts:    portStrings(b.AllowedPorts),
		AllowedWebPorts: portStrings(b.AllowedWebPorts),
		WebTLS:          b.TLS.Enabled,
		AllowedHosts:    b.AllowedHosts,
		SNIServiceNames: sniNames,
		LearnedTTL:      b.LearnedTargetLifetime,
		Logger:          log,
	})
}

func portStrings(ports []int) []string {
	out := make([]string, len(ports))
	for i, port := range ports {
		out[i] = strconv.Itoa(port)
	}
	return out
}

// discoveryProviders builds every configured provider; config validation has already made
// sure there is at least one. webTLS makes the web service URLs that providers derive
// https://.
func discoveryProviders(c config.Discovery, webTLS bool, log zerolog.Logger, m *discovery.Metrics) ([]discovery.Provider, error) {
	var ps []discovery.Provider
	if len(c.Static.Brokers) > 0 {
		s, err := discovery.NewStaticWeb(c.Static.Brokers, c.Static.WebBrokers)
		if err != nil {
			return nil, fmt.Errorf("discovery.static.brokers: %w", err)
		}
		m.AddStatic(s)
		ps = append(ps, s)
	}
	if c.Consul.Service != "" {
		cp, err := discovery.NewConsul(discovery.ConsulConfig{
			Service:    c.Consul.Service,
			Tag:        c.Consul.Tag,
			Datacenter: c.Consul.Datacenter,
			Address:    c.Consul.Address,
			Token:      c.Consul.Token,
			WaitTime:   c.Consul.WaitTime,
			WebTLS:     webTLS,
		}, log, m)
		if err != nil {
			return nil, fmt.Errorf("discovery.consul: %w", err)
		}
		ps = append(ps, cp)
	}
	if c.DNS.Name != "" {
		dp, err := discovery.NewDNS(discovery.DNSConfig{
			Name:     c.DNS.Name,
			SRV:      c.DNS.Record == "SRV",
			Port:     c.DNS.Port,
			Server:   c.DNS.Server,
			Interval: c.DNS.RefreshInterval,
			WebPort:  c.DNS.WebPort,
			WebTLS:   webTLS,
		}, log, m)
		if err != nil {
			return nil, fmt.Errorf("discovery.dns: %w", err)
		}
		ps = append(ps, dp)
	}
	if c.MetadataStore.URL != "" {
		zp, err := metadataStoreProvider(c.MetadataStore, webTLS, log, m)
		if err != nil {
			return nil, fmt.Errorf("discovery.metadataStore: %w", err)
		}
		ps = append(ps, zp)
	}
	return ps, nil
}

// metadataStoreProvider builds the ZooKeeper provider of discovery.metadataStore.
func metadataStoreProvider(c config.MetadataStore, brokerTLS bool, log zerolog.Logger, m *discovery.Metrics) (*discovery.ZooKeeper, error) {
	addr, err := zkaddr.Parse(c.URL)
	if err != nil {
		return nil, err
	}
	digest := c.Digest
	if c.DigestFile != "" {
		b, err := os.ReadFile(c.DigestFile)
		if err != nil {
			return nil, fmt.Errorf("digestFile: %w", err)
		}
		digest = strings.TrimSpace(string(b))
	}
	zc := discovery.ZooKeeperConfig{
		Servers: addr.Servers, Chroot: addr.Chroot, SessionTimeout: c.SessionTimeout,
		Digest: digest, BrokerTLS: brokerTLS, Listener: c.ListenerName,
	}
	if c.TLS.Enabled {
		t := c.TLS
		if zc.TLS, err = discovery.ZooKeeperTLS(t.TrustCertsFile, t.CertFile, t.KeyFile, t.SkipHostnameVerification); err != nil {
			return nil, err
		}
	}
	return discovery.NewZooKeeper(zc, log, m)
}
