package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/lookup/brokerhost"
)

// Validate reports every problem in c, one per line, each starting with the
// yaml key path it concerns. Load calls it; code that builds a Config by
// hand should too.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "must be greater than 0, got %s", d)
		}
	}
	between := func(key string, n, lo, hi int) {
		if n < lo || n > hi {
			bad(key, "must be between %d and %d, got %d", lo, hi, n)
		}
	}
	oneOf := func(key, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			bad(key, "%q is not one of %s", v, strings.Join(allowed, "|"))
		}
	}

	listenAddr := func(key, addr string) {
		if err := checkListenAddr(addr); err != nil {
			bad(key, "%q: %v", addr, err)
		}
	}

	listenAddr("listen.pulsar", c.Listen.Pulsar)
	listenAddr("listen.http", c.Listen.HTTP)
	if c.Listen.Pulsar == c.Listen.HTTP && !strings.HasSuffix(c.Listen.Pulsar, ":0") {
		bad("listen.http", "same address as listen.pulsar (%q)", c.Listen.Pulsar)
	}

	if c.Listen.PulsarTLS != "" {
		listenAddr("listen.pulsarTLS", c.Listen.PulsarTLS)
		if c.Listen.PulsarTLS == c.Listen.Pulsar && !strings.HasSuffix(c.Listen.Pulsar, ":0") {
			bad("listen.pulsarTLS", "same address as listen.pulsar (%q)", c.Listen.Pulsar)
		}
		if c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
			bad("tls.certFile", "listen.pulsarTLS needs tls.certFile and tls.keyFile")
		}
	}
	oneOf("tls.minVersion", c.TLS.MinVersion, "1.0", "1.1", "1.2", "1.3")
	oneOf("tls.clientAuth", c.TLS.ClientAuth, "none", "request", "require")
	if c.TLS.ClientAuth != "none" && c.TLS.ClientCAFile == "" {
		bad("tls.clientCAFile", "tls.clientAuth %s needs a client CA file", c.TLS.ClientAuth)
	}
	pp := c.ProxyProtocol
	for i, cidr := range pp.TrustedCIDRs {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			bad(fmt.Sprintf("proxyProtocol.trustedCIDRs[%d]", i), "%q: %v", cidr, err)
		}
	}
	if pp.ProxyProtocolEnabled && len(pp.TrustedCIDRs) == 0 {
		bad("proxyProtocol.trustedCIDRs", "proxyProtocol.enabled needs at least one trusted CIDR (headers from anywhere else are refused)")
	}
	if pp.HeaderTimeout <= 0 {
		bad("proxyProtocol.headerTimeout", "must be positive, got %s", pp.HeaderTimeout)
	}

	d := c.Discovery
	if len(d.Static.Brokers) == 0 && d.Consul.ConsulService == "" && d.DNS.DNSName == "" {
		bad("discovery", "no broker discovery configured: set discovery.static.brokers, discovery.consul.service or discovery.dns.name")
	}
	for i, b := range d.Static.Brokers {
		key := fmt.Sprintf("discovery.static.brokers[%d]", i)
		if err := checkBrokerURL(b); err != nil {
			bad(key, "%q: %v", b, err)
		} else if j := slices.Index(d.Static.Brokers, b); j < i {
			bad(key, "%q is listed twice (also brokers[%d])", b, j)
		} else if p, _ := strconv.Atoi(brokerPort(b)); !slices.Contains(c.Broker.AllowedPorts, p) {
			bad(key, "%q: port %d is not in broker.allowedPorts %v", b, p, c.Broker.AllowedPorts)
		}
	}
	if d.Consul.ConsulService != "" {
		if d.Consul.ConsulWaitTime <= 0 || d.Consul.ConsulWaitTime > 10*time.Minute {
			bad("discovery.consul.waitTime", "must be greater than 0 and at most 10m (Consul's cap), got %s", d.Consul.ConsulWaitTime)
		}
		if a := d.Consul.ConsulAddress; a != "" {
			if err := checkConsulAddress(a); err != nil {
				bad("discovery.consul.address", "%q: %v", a, err)
			}
		}
	}
	if d.DNS.DNSName != "" {
		if !isDNSName(d.DNS.DNSName) {
			bad("discovery.dns.name", "%q is not a DNS name (want e.g. pulsar-broker.pulsar.svc.cluster.local)", d.DNS.DNSName)
		}
		oneOf("discovery.dns.record", d.DNS.DNSRecord, "A", "SRV")
		if d.DNS.DNSRecord == "A" {
			if !slices.Contains(c.Broker.AllowedPorts, d.DNS.DNSPort) {
				bad("discovery.dns.port", "%d is not in broker.allowedPorts %v", d.DNS.DNSPort, c.Broker.AllowedPorts)
			}
		}
		if srv := d.DNS.DNSServer; srv != "" {
			if err := checkListenAddr(srv); err != nil {
				bad("discovery.dns.server", "%q: %v", srv, err)
			}
		}
		positive("discovery.dns.refreshInterval", d.DNS.DNSRefreshInterval)
	}
	positive("discovery.healthCheckInterval", d.HealthCheckInterval)

	positive("broker.dialTimeout", c.Broker.DialTimeout)
	positive("broker.connectTimeout", c.Broker.ConnectTimeout)
	positive("broker.lookupTimeout", c.Broker.LookupTimeout)
	between("broker.maxLookupRedirects", c.Broker.MaxLookupRedirects, 1, 32)
	between("broker.lookupConnectionsPerBroker", c.Broker.LookupConnectionsPerBroker, 1, 16)
	if len(c.Broker.AllowedPorts) == 0 {
		bad("broker.allowedPorts", "at least one port is required")
	}
	for i, p := range c.Broker.AllowedPorts {
		between(fmt.Sprintf("broker.allowedPorts[%d]", i), p, 1, 65535)
	}
	for i, h := range c.Broker.AllowedHosts {
		if err := brokerhost.CheckPattern(h); err != nil {
			bad(fmt.Sprintf("broker.allowedHosts[%d]", i), "%q is not a host pattern: %v (want DNS labels that may hold * and ?, each matched on its own, e.g. *.broker.pulsar.svc.cluster.local)", h, err)
		}
	}
	oneOf("broker.proxyProtocol", c.Broker.BrokerProxyProtocol, "off", "v1", "v2")
	bt := c.Broker.TLS
	oneOf("broker.tls.minVersion", bt.BrokerMinVersion, "1.2", "1.3")
	if (bt.BrokerCertFile == "") != (bt.BrokerKeyFile == "") {
		bad("broker.tls.certFile", "certFile and keyFile go together (the proxy's client certificate and its key)")
	}
	for i, b := range d.Static.Brokers {
		// One switch decides how brokers are reached, so a URL cannot say otherwise.
		if ssl := strings.HasPrefix(b, "pulsar+ssl://"); ssl != bt.BrokerTLSEnabled {
			bad(fmt.Sprintf("discovery.static.brokers[%d]", i), "%q: pulsar+ssl:// URLs go with broker.tls.enabled: true, pulsar:// with false", b)
		}
	}
	if c.Broker.LearnedTargetLifetime < 0 {
		bad("broker.learnedTargetLifetime", "must be 0 (off) or greater, got %s", c.Broker.LearnedTargetLifetime)
	}

	positive("session.handshakeTimeout", c.Session.HandshakeTimeout)
	positive("session.keepAliveInterval", c.Session.KeepAliveInterval)
	between("session.maxFrameSize", c.Session.MaxFrameSize, 1<<10, 128<<20)
	if c.Session.MaxPendingLookups <= 0 {
		bad("session.maxPendingLookups", "must be greater than 0, got %d", c.Session.MaxPendingLookups)
	}
	if c.Session.MaxConnections < 0 {
		bad("session.maxConnections", "must be 0 (unlimited) or greater, got %d", c.Session.MaxConnections)
	}
	if c.Session.MaxConnectionsPerIP < 0 {
		bad("session.maxConnectionsPerIP", "must be 0 (unlimited) or greater, got %d", c.Session.MaxConnectionsPerIP)
	}
	positive("session.drainTimeout", c.Session.DrainTimeout)
	if c.Session.ConnectionRatePerIP < 0 {
		bad("session.connectionRatePerIP", "must be 0 (unlimited) or greater, got %v", c.Session.ConnectionRatePerIP)
	}
	if c.Session.ConnectionBurstPerIP < 1 {
		bad("session.connectionBurstPerIP", "must be at least 1, got %d", c.Session.ConnectionBurstPerIP)
	}
	between("session.ipv6PrefixLength", c.Session.IPv6PrefixLength, 32, 128)

	tok := c.Auth.Token
	if c.Auth.Enabled && tok.SecretKeyFile == "" && tok.PublicKeyFile == "" && tok.JWKSURL == "" {
		bad("auth.token", "auth.enabled needs token.secretKeyFile, token.publicKeyFile or token.jwksURL")
	}
	c.validateJWKS(bad, positive)
	if c.Auth.Token.RoleClaim == "" {
		bad("auth.token.roleClaim", "must not be empty")
	}
	if c.Auth.Token.Leeway < 0 {
		bad("auth.token.leeway", "must not be negative, got %s", c.Auth.Token.Leeway)
	}
	c.validateCertRole(bad, oneOf)
	positive("auth.refreshTimeout", c.Auth.RefreshTimeout)
	if c.Auth.BrokerClient.Token != "" && c.Auth.BrokerClient.TokenFile != "" {
		bad("auth.brokerClient.token", "set token or tokenFile, not both")
	}
	if c.Authz.PolicyEnabled && c.Authz.PolicyFile == "" {
		bad("authz.policyFile", "authz.enabled needs a policy file")
	}
	if c.Authz.PolicyEnabled && !c.Auth.Enabled {
		bad("authz.enabled", "needs auth.enabled: the policy is written for authenticated roles")
	}
	positive("authz.reloadInterval", c.Authz.ReloadInterval)

	oneOf("log.level", c.Log.Level, "trace", "debug", "info", "warn", "error")
	oneOf("log.format", c.Log.Format, "json", "console")
	oneOf("log.sessionSummary", c.Log.SessionSummary, "debug", "info", "off")
	return errors.Join(errs...)
}

// validateJWKS checks the identity provider's key set settings.
func (c *Config) validateJWKS(bad func(key, format string, args ...any), positive func(key string, d time.Duration)) {
	tok := c.Auth.Token
	for i, iss := range tok.Issuers {
		if strings.TrimSpace(iss) == "" {
			bad(fmt.Sprintf("auth.token.issuers[%d]", i), "must not be empty")
		}
	}
	if tok.JWKSURL == "" {
		if tok.JWKSCAFile != "" {
			bad("auth.token.jwksCAFile", "only applies with auth.token.jwksURL")
		}
		return
	}
	if err := checkJWKSURL(tok.JWKSURL); err != nil {
		bad("auth.token.jwksURL", "%q: %v", tok.JWKSURL, err)
	}
	if tok.SecretKeyFile != "" || tok.PublicKeyFile != "" {
		bad("auth.token.jwksURL", "set jwksURL or a key file (secretKeyFile, publicKeyFile), not both")
	}
	if len(tok.Issuers) == 0 {
		bad("auth.token.issuers", "auth.token.jwksURL needs the provider's issuer (the tokens' iss), e.g. https://idp.example.com/realms/pulsar")
	}
	positive("auth.token.jwksRefreshInterval", tok.JWKSRefreshInterval)
	positive("auth.token.jwksMinRefetchInterval", tok.JWKSMinRefetchInterval)
	positive("auth.token.jwksTimeout", tok.JWKSTimeout)
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
func (c *Config) validateCertRole(bad func(key, format string, args ...any), oneOf func(key, v string, allowed ...string)) {
	ct := c.Auth.ClientCert
	oneOf("auth.tls.roleFrom", ct.RoleFrom, "cn", "san-dns", "san-uri")
	if ct.URIPrefix == "" {
		return
	}
	if ct.RoleFrom != "san-uri" {
		bad("auth.tls.uriPrefix", "only applies with auth.tls.roleFrom san-uri (roleFrom is %q)", ct.RoleFrom)
	}
	if u, err := url.Parse(ct.URIPrefix); err != nil || u.Scheme == "" {
		bad("auth.tls.uriPrefix", "%q is not the start of a URI with its scheme (e.g. spiffe://cluster.local/ns/app/sa/)", ct.URIPrefix)
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
