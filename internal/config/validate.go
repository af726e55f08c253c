package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
	"github.com/pulsar-proxy/pulsar-proxy/internal/zkaddr"
)

// validate reports every problem in c, one per line, each starting with the
// yaml key path it concerns. Load calls it: a Config comes only from Load.
func (c *Config) validate() error {
	var p problems
	c.validateListen(&p)
	c.validateTLS(&p)
	c.validateProxyProtocol(&p)
	c.validateDiscovery(&p)
	c.validateBroker(&p)
	c.validateSession(&p)
	c.validateAuth(&p)
	c.validateAuthz(&p)
	c.validateAdmin(&p)
	c.validateWebSocket(&p)
	c.validateSNI(&p)
	p.oneOf("log.level", c.Log.Level, "trace", "debug", "info", "warn", "error")
	p.oneOf("log.format", c.Log.Format, "json", "console")
	p.oneOf("log.sessionSummary", c.Log.SessionSummary, "debug", "info", "off")
	p.positive("log.refusalInterval", c.Log.RefusalInterval)
	return errors.Join(p...)
}

// problems collects what validate finds; each check names the key it concerns.
type problems []error

func (p *problems) bad(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

func (p *problems) positive(key string, d time.Duration) {
	if d <= 0 {
		p.bad(key, "must be greater than 0, got %s", d)
	}
}

func (p *problems) atLeastZero(key string, n int, zeroMeans string) {
	if n < 0 {
		p.bad(key, "must be 0 (%s) or greater, got %d", zeroMeans, n)
	}
}

func (p *problems) between(key string, n, lo, hi int) {
	if n < lo || n > hi {
		p.bad(key, "must be between %d and %d, got %d", lo, hi, n)
	}
}

func (p *problems) oneOf(key, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		p.bad(key, "%q is not one of %s", v, strings.Join(allowed, "|"))
	}
}

func (p *problems) listenAddr(key, addr string) {
	if err := checkListenAddr(addr); err != nil {
		p.bad(key, "%q: %v", addr, err)
	}
}

func (c *Config) validateListen(p *problems) {
	l := c.Listen
	// listen.pulsar may be empty beside listen.pulsarTLS: a TLS-only proxy (Apache's proxy with
	// servicePort empty), with no plaintext Pulsar port at all.
	switch {
	case l.Pulsar == "" && l.PulsarTLS == "" && l.PulsarSNI == "":
		p.bad("listen.pulsar", "empty, and so are listen.pulsarTLS and listen.pulsarSNI: the proxy would serve no Pulsar client (leave listen.pulsar empty only for a TLS-only or SNI-only proxy)")
	case l.Pulsar != "":
		p.listenAddr("listen.pulsar", l.Pulsar)
	}
	p.listenAddr("listen.http", l.HTTP)
	c.validateAdvertised(p)
	// Port 0 (tests) is a different port on each listener.
	anyPort := strings.HasSuffix(l.Pulsar, ":0")
	if l.Pulsar != "" && l.Pulsar == l.HTTP && !anyPort {
		p.bad("listen.http", "same address as listen.pulsar (%q)", l.Pulsar)
	}
	if l.PulsarTLS == "" {
		return
	}
	p.listenAddr("listen.pulsarTLS", l.PulsarTLS)
	if l.PulsarTLS == l.Pulsar && !anyPort {
		p.bad("listen.pulsarTLS", "same address as listen.pulsar (%q)", l.Pulsar)
	}
	if c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
		p.bad("tls.certFile", "listen.pulsarTLS needs tls.certFile and tls.keyFile")
	}
}

// validateAdvertised checks each advertised URL: the scheme its listener speaks, a host and
// a port, nothing else; and no URL for a listener that is off.
func (c *Config) validateAdvertised(p *problems) {
	a, l := c.Listen.Advertised, c.Listen
	for _, u := range []struct{ key, url, scheme, listener string }{
		{"listen.advertised.pulsar", a.Pulsar, "pulsar", l.Pulsar},
		{"listen.advertised.pulsarTLS", a.PulsarTLS, "pulsar+ssl", l.PulsarTLS},
		{"listen.advertised.http", a.HTTP, "http", l.HTTP},
		{"listen.advertised.https", a.HTTPS, "https", c.Admin.ListenHTTPS},
	} {
		if u.url == "" {
			continue
		}
		if u.listener == "" {
			p.bad(u.key, "set, but its listener is off")
			continue
		}
		parsed, err := url.Parse(u.url)
		if err != nil || parsed.Scheme != u.scheme || parsed.Hostname() == "" || parsed.Port() == "" ||
			(parsed.Path != "" && parsed.Path != "/") || parsed.RawQuery != "" || parsed.User != nil {
			p.bad(u.key, "%q is not %s://host:port", u.url, u.scheme)
		}
	}
}

func (c *Config) validateTLS(p *problems) {
	t := c.TLS
	if t.MinVersion < tls.VersionTLS10 || t.MinVersion > tls.VersionTLS13 {
		p.bad("tls.minVersion", "%q is not one of 1.0|1.1|1.2|1.3", t.MinVersion.String())
	}
	p.oneOf("tls.clientAuth", t.ClientAuth, "none", "request", "require")
	if t.ClientAuth != "none" && t.ClientCAFile == "" {
		p.bad("tls.clientCAFile", "tls.clientAuth %s needs a client CA file", t.ClientAuth)
	}
}

func (c *Config) validateProxyProtocol(p *problems) {
	pp := c.ProxyProtocol
	for i, prefix := range pp.TrustedCIDRs {
		if !prefix.IsValid() {
			p.bad(fmt.Sprintf("proxyProtocol.trustedCIDRs[%d]", i), "not a CIDR")
		}
	}
	if pp.Enabled && len(pp.TrustedCIDRs) == 0 {
		p.bad("proxyProtocol.trustedCIDRs", "proxyProtocol.enabled needs at least one trusted CIDR (headers from anywhere else are refused)")
	}
	if pp.HeaderTimeout <= 0 {
		p.bad("proxyProtocol.headerTimeout", "must be positive, got %s", pp.HeaderTimeout)
	}
}

func (c *Config) validateDiscovery(p *problems) {
	d := c.Discovery
	if len(d.Static.Brokers) == 0 && d.Consul.Service == "" && d.DNS.Name == "" && d.MetadataStore.URL == "" {
		p.bad("discovery", "no broker discovery configured: set discovery.static.brokers, discovery.consul.service, discovery.dns.name or discovery.metadataStore.url")
	}
	c.validateStaticBrokers(p)
	if d.Consul.Service != "" {
		if d.Consul.WaitTime <= 0 || d.Consul.WaitTime > 10*time.Minute {
			p.bad("discovery.consul.waitTime", "must be greater than 0 and at most 10m (Consul's cap), got %s", d.Consul.WaitTime)
		}
		if a := d.Consul.Address; a != "" {
			if err := checkConsulAddress(a); err != nil {
				p.bad("discovery.consul.address", "%q: %v", a, err)
			}
		}
	}
	if d.DNS.Name != "" {
		c.validateDNS(p)
	}
	if d.MetadataStore.URL != "" {
		validateMetadataStore(p, d.MetadataStore)
	}
	p.positive("discovery.healthCheckInterval", d.HealthCheckInterval)
}

// validateStaticBrokers checks each URL, its port against broker.allowedPorts and its
// scheme against broker.tls.enabled: one switch decides how brokers are reached, so a URL
// cannot say otherwise.
func (c *Config) validateStaticBrokers(p *problems) {
	brokers := c.Discovery.Static.Brokers
	for i, b := range brokers {
		key := fmt.Sprintf("discovery.static.brokers[%d]", i)
		if err := checkBrokerURL(b); err != nil {
			p.bad(key, "%q: %v", b, err)
		} else if j := slices.Index(brokers, b); j < i {
			p.bad(key, "%q is listed twice (also brokers[%d])", b, j)
		} else if port, _ := strconv.Atoi(brokerPort(b)); !slices.Contains(c.Broker.AllowedPorts, port) {
			p.bad(key, "%q: port %d is not in broker.allowedPorts %v", b, port, c.Broker.AllowedPorts)
		}
		if ssl := strings.HasPrefix(b, "pulsar+ssl://"); ssl != c.Broker.TLS.Enabled {
			p.bad(key, "%q: pulsar+ssl:// URLs go with broker.tls.enabled: true, pulsar:// with false", b)
		}
	}
}

func (c *Config) validateDNS(p *problems) {
	dns := c.Discovery.DNS
	if !isDNSName(dns.Name) {
		p.bad("discovery.dns.name", "%q is not a DNS name (want e.g. pulsar-broker.pulsar.svc.cluster.local)", dns.Name)
	}
	p.oneOf("discovery.dns.record", dns.Record, "A", "SRV")
	if dns.Record == "A" && !slices.Contains(c.Broker.AllowedPorts, dns.Port) {
		p.bad("discovery.dns.port", "%d is not in broker.allowedPorts %v", dns.Port, c.Broker.AllowedPorts)
	}
	if srv := dns.Server; srv != "" {
		if err := checkListenAddr(srv); err != nil {
			p.bad("discovery.dns.server", "%q: %v", srv, err)
		}
	}
	p.positive("discovery.dns.refreshInterval", dns.RefreshInterval)
}

// validateMetadataStore checks the connect string and the credentials' shape; ZooKeeper
// itself is only asked when the proxy runs (check-config --connect).
func validateMetadataStore(p *problems, m MetadataStore) {
	if strings.HasPrefix(m.URL, "etcd:") {
		p.bad("discovery.metadataStore.url", "%q: only ZooKeeper is supported (zk:host:port[,host:port...][/chroot])", m.URL)
	} else if _, err := zkaddr.Parse(m.URL); err != nil {
		p.bad("discovery.metadataStore.url", "%v", err)
	}
	// ZooKeeper grants 2 to 20 ticks (2 s by default): 4 s to 40 s.
	if m.SessionTimeout < time.Second || m.SessionTimeout > 10*time.Minute {
		p.bad("discovery.metadataStore.sessionTimeout", "must be between 1s and 10m, got %s", m.SessionTimeout)
	}
	if m.Digest != "" && m.DigestFile != "" {
		p.bad("discovery.metadataStore.digest", "set digest or digestFile, not both")
	}
	if m.Digest != "" && !strings.Contains(m.Digest, ":") {
		p.bad("discovery.metadataStore.digest", "want user:password")
	}
	t := m.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.bad("discovery.metadataStore.tls.certFile", "certFile and keyFile go together")
	}
	if !t.Enabled && (t.TrustCertsFile != "" || t.CertFile != "" || t.SkipHostnameVerification) {
		p.bad("discovery.metadataStore.tls.enabled", "TLS files or options are set but tls.enabled is false")
	}
}

func (c *Config) validateBroker(p *problems) {
	b := c.Broker
	p.positive("broker.dialTimeout", b.DialTimeout)
	p.positive("broker.connectTimeout", b.ConnectTimeout)
	p.positive("broker.lookupTimeout", b.LookupTimeout)
	p.between("broker.maxLookupRedirects", b.MaxLookupRedirects, 1, 32)
	p.between("broker.lookupConnectionsPerBroker", b.LookupConnectionsPerBroker, 1, 16)
	if len(b.AllowedPorts) == 0 {
		p.bad("broker.allowedPorts", "at least one port is required")
	}
	for i, port := range b.AllowedPorts {
		p.between(fmt.Sprintf("broker.allowedPorts[%d]", i), port, 1, 65535)
	}
	for i, port := range b.AllowedWebPorts {
		p.between(fmt.Sprintf("broker.allowedWebPorts[%d]", i), port, 1, 65535)
	}
	for i, h := range b.AllowedHosts {
		if err := brokerhost.CheckPattern(h); err != nil {
			p.bad(fmt.Sprintf("broker.allowedHosts[%d]", i), "%q is not a host pattern: %v (want DNS labels that may hold * and ?, each matched on its own, e.g. *.broker.pulsar.svc.cluster.local)", h, err)
		}
	}
	if b.LearnedTargetLifetime < 0 {
		p.bad("broker.learnedTargetLifetime", "must be 0 (off) or greater, got %s", b.LearnedTargetLifetime)
	}
	p.oneOf("broker.proxyProtocol", b.ProxyProtocol, "off", "v1", "v2")
	if v := b.TLS.MinVersion; v != tls.VersionTLS12 && v != tls.VersionTLS13 {
		p.bad("broker.tls.minVersion", "%q is not one of 1.2|1.3", v.String())
	}
	if (b.TLS.CertFile == "") != (b.TLS.KeyFile == "") {
		p.bad("broker.tls.certFile", "certFile and keyFile go together (the proxy's client certificate and its key)")
	}
	c.validateMultiplex(p)
}

// validateMultiplex refuses broker.multiplex with what needs a broker connection per client:
// forwarded client credentials (a broker authenticates one client per connection) and a
// PROXY header to brokers (it names one client). Unframed passthrough is not refused: the
// multiplex implies session.passthrough: false (derive).
func (c *Config) validateMultiplex(p *problems) {
	b := c.Broker
	p.between("broker.multiplexConnections", b.MultiplexConnections, 1, 1024)
	p.between("broker.multiplexClientQueueBytes", b.MultiplexClientQueueBytes, 64<<10, 1<<30)
	if !b.Multiplex {
		return
	}
	if c.Auth.ForwardClientCredentials {
		p.bad("broker.multiplex", "cannot be on with auth.forwardClientCredentials: brokers authenticate the forwarded credentials of one client per connection")
	}
	if b.ProxyProtocol != "off" {
		p.bad("broker.multiplex", "cannot be on with broker.proxyProtocol: a shared connection carries many clients, and a PROXY header names one")
	}
}

func (c *Config) validateSession(p *problems) {
	s := c.Session
	p.positive("session.handshakeTimeout", s.HandshakeTimeout)
	p.positive("session.keepAliveInterval", s.KeepAliveInterval)
	p.between("session.maxFrameSize", s.MaxFrameSize, 1<<10, 128<<20)
	if s.MaxPendingLookups <= 0 {
		p.bad("session.maxPendingLookups", "must be greater than 0, got %d", s.MaxPendingLookups)
	}
	p.atLeastZero("session.maxConnections", s.MaxConnections, "unlimited")
	p.atLeastZero("session.maxLookupsInFlight", s.MaxLookupsInFlight, "unbounded")
	if s.StallTimeout < 0 {
		p.bad("session.stallTimeout", "must be 0 (never) or greater, got %v", s.StallTimeout)
	}
	p.atLeastZero("session.maxConnectionsPerIP", s.MaxConnectionsPerIP, "unlimited")
	p.positive("session.drainTimeout", s.DrainTimeout)
	if s.ConnectionRatePerIP < 0 {
		p.bad("session.connectionRatePerIP", "must be 0 (unlimited) or greater, got %v", s.ConnectionRatePerIP)
	}
	if s.ConnectionBurstPerIP < 1 {
		p.bad("session.connectionBurstPerIP", "must be at least 1, got %d", s.ConnectionBurstPerIP)
	}
	p.between("session.ipv6PrefixLength", s.IPv6PrefixLength, 32, 128)
	if s.DescriptorReserve < 64 {
		p.bad("session.descriptorReserve", "must be at least 64 (the listeners, the broker pool, discovery and reloads need some), got %d", s.DescriptorReserve)
	}
}

func (c *Config) validateAuth(p *problems) {
	tok := c.Auth.Token
	if c.Auth.Enabled && tok.SecretKeyFile == "" && tok.PublicKeyFile == "" && tok.JWKSURL == "" && c.Auth.Basic.CredentialsFile == "" {
		p.bad("auth.token", "auth.enabled needs token.secretKeyFile, token.publicKeyFile, token.jwksURL or basic.credentialsFile")
	}
	p.positive("auth.basic.reloadInterval", c.Auth.Basic.ReloadInterval)
	c.validateJWKS(p)
	if tok.RoleClaim == "" {
		p.bad("auth.token.roleClaim", "must not be empty")
	}
	if tok.Leeway < 0 {
		p.bad("auth.token.leeway", "must not be negative, got %s", tok.Leeway)
	}
	c.validateCertRole(p)
	p.positive("auth.refreshTimeout", c.Auth.RefreshTimeout)
	if c.Auth.BrokerClient.Token != "" && c.Auth.BrokerClient.TokenFile != "" {
		p.bad("auth.brokerClient.token", "set token or tokenFile, not both")
	}
}

func (c *Config) validateAuthz(p *problems) {
	if c.Authz.Enabled && c.Authz.PolicyFile == "" {
		p.bad("authz.policyFile", "authz.enabled needs a policy file")
	}
	if c.Authz.Enabled && !c.Auth.Enabled {
		p.bad("authz.enabled", "needs auth.enabled: the policy is written for authenticated roles")
	}
	p.positive("authz.reloadInterval", c.Authz.ReloadInterval)
}

// validateJWKS checks the identity provider's key set settings.
func (c *Config) validateJWKS(p *problems) {
	tok := c.Auth.Token
	for i, iss := range tok.Issuers {
		if strings.TrimSpace(iss) == "" {
			p.bad(fmt.Sprintf("auth.token.issuers[%d]", i), "must not be empty")
		}
	}
	if tok.JWKSURL == "" {
		if tok.JWKSCAFile != "" {
			p.bad("auth.token.jwksCAFile", "only applies with auth.token.jwksURL")
		}
		return
	}
	if err := checkJWKSURL(tok.JWKSURL); err != nil {
		p.bad("auth.token.jwksURL", "%q: %v", tok.JWKSURL, err)
	}
	if tok.SecretKeyFile != "" || tok.PublicKeyFile != "" {
		p.bad("auth.token.jwksURL", "set jwksURL or a key file (secretKeyFile, publicKeyFile), not both")
	}
	if len(tok.Issuers) == 0 {
		p.bad("auth.token.issuers", "auth.token.jwksURL needs the provider's issuer (the tokens' iss), e.g. https://idp.example.com/realms/pulsar")
	}
	p.positive("auth.token.jwksRefreshInterval", tok.JWKSRefreshInterval)
	p.positive("auth.token.jwksMinRefetchInterval", tok.JWKSMinRefetchInterval)
	p.positive("auth.token.jwksTimeout", tok.JWKSTimeout)
}

// checkJWKSURL wants https: the key set decides who may connect, so it must not travel in
// clear text. Plain http is accepted to a loopback address only (a local sidecar, tests).
func checkJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return errors.New("want an https:// URL")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return errors.New("http is allowed to a loopback address only (127.0.0.1, ::1, localhost); use https")
	}
	return errors.New("want an https:// URL")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// validateCertRole checks where the tls auth method takes a client's role from.
func (c *Config) validateCertRole(p *problems) {
	ct := c.Auth.ClientCert
	p.oneOf("auth.tls.roleFrom", ct.RoleFrom, "cn", "san-dns", "san-uri")
	if ct.URIPrefix == "" {
		return
	}
	if ct.RoleFrom != "san-uri" {
		p.bad("auth.tls.uriPrefix", "only applies with auth.tls.roleFrom san-uri (roleFrom is %q)", ct.RoleFrom)
	}
	if u, err := url.Parse(ct.URIPrefix); err != nil || u.Scheme == "" {
		p.bad("auth.tls.uriPrefix", "%q is not the start of a URI with its scheme (e.g. spiffe://cluster.local/ns/app/sa/)", ct.URIPrefix)
	}
}

// checkListenAddr accepts what net.Listen would, except service names: a
// numeric port makes the configuration mean the same on every host.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// checkBrokerURL rejects anything the proxy would have to ignore or guess
// at: paths, queries, credentials and multi-host URLs would otherwise be
// dropped silently when dialing. Host and port follow the proxy's own parser
// (brokerhost), which also refuses odd spellings of a host or port.
func checkBrokerURL(s string) error {
	if strings.HasSuffix(s, "/") {
		return errors.New("must be only scheme://host:port, without path, query or credentials")
	}
	_, _, _, err := brokerhost.ParseURL(s)
	return err
}

// brokerPort is the port of a URL that checkBrokerURL accepted.
func brokerPort(s string) string {
	_, _, port, _ := brokerhost.ParseURL(s)
	return port
}

// checkConsulAddress accepts what the Consul client does: host:port, or an
// http(s) URL of the agent.
func checkConsulAddress(a string) error {
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("want host:port or http(s)://host:port")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return errors.New("want host:port or http(s)://host:port")
	}
	return nil
}

// isDNSName accepts a host name of letters, digits, '-' and '_' labels (SRV
// names start with _service._proto), with an optional final dot; not an IP.
func isDNSName(name string) bool {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 253 || net.ParseIP(name) != nil {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
