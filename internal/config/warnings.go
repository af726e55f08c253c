package config

import (
	"fmt"
	"net"
)

// Warning is a setting that loads and works, but that an operator should look at: a risk, or
// something set that has no effect. The proxy logs each one at start and check-config prints
// each one, from this one list, so that the two cannot tell different stories.
type Warning struct {
	Key     string // the setting it concerns, as the file spells it
	Message string
}

// Warnings are the warnings of c, in the order of the sections.
func (c *Config) Warnings() []Warning {
	var w warnings
	for _, im := range c.implied {
		if im.Overrode {
			w.add(im.Key, "the value given does not apply: %s implies %s", im.Because, im.Value)
		}
	}
	c.exposureWarnings(&w)
	c.unusedWarnings(&w)
	c.adminWarnings(&w)
	c.sniWarnings(&w)
	if t := c.Auth.Token; c.Auth.Enabled && t.JWKSURL != "" && t.Audience == "" {
		w.add("auth.token.audience", "empty with jwksURL: tokens the identity provider issues for any of its applications are accepted")
	}
	if b := c.Broker.TLS; b.Enabled && b.SkipHostnameVerification {
		w.add("broker.tls.skipHostnameVerification", "on: any certificate from a trusted CA is accepted for any broker")
	}
	return w
}

type warnings []Warning

func (w *warnings) add(key, format string, args ...any) {
	*w = append(*w, Warning{Key: key, Message: fmt.Sprintf(format, args...)})
}

// exposureWarnings are the risky settings: PROXY headers trusted from anywhere, and
// listeners that serve clients nobody authenticated on an address other than loopback.
func (c *Config) exposureWarnings(w *warnings) {
	if pp := c.ProxyProtocol; pp.Enabled {
		for i, p := range pp.TrustedCIDRs {
			if p.Bits() == 0 {
				w.add(fmt.Sprintf("proxyProtocol.trustedCIDRs[%d]", i), "%s trusts every source: any client can send a PROXY header and claim any address (per-IP limits and logs then see what it claims); list only your load balancers' addresses", p)
			}
		}
	}
	if c.Auth.Enabled {
		return
	}
	// A TLS listener that requires a client certificate lets in only clients the CA vouches for.
	certOnly := c.TLS.ClientAuth == "require"
	open := func(key, addr, what string) {
		if addr != "" && !loopbackAddr(addr) {
			w.add(key, "%s is on %s, not a loopback address, and auth.enabled is false: %s", what, addr, "anyone who reaches it is served without authentication (give auth.token a key, or listen on 127.0.0.1)")
		}
	}
	open("listen.pulsar", c.Listen.Pulsar, "the Pulsar listener")
	if !certOnly {
		open("listen.pulsarTLS", c.Listen.PulsarTLS, "the Pulsar TLS listener")
	}
	if what := c.httpPlanes(); what != "" {
		open("listen.http", c.Listen.HTTP, what)
		if !certOnly {
			open("admin.listenHTTPS", c.Admin.ListenHTTPS, what+" over HTTPS")
		}
	}
}

// httpPlanes names what the HTTP listeners serve clients, for the exposure warning: the
// admin API, the WebSocket API (its producers and consumers), or both; "" for neither.
func (c *Config) httpPlanes() string {
	switch {
	case c.Admin.Enabled && c.WebSocket.Enabled:
		return "the admin API (admin.enabled) and the WebSocket API (websocket.enabled)"
	case c.Admin.Enabled:
		return "the admin API (admin.enabled)"
	case c.WebSocket.Enabled:
		return "the WebSocket API (websocket.enabled)"
	}
	return ""
}

// unusedWarnings are settings given a value that nothing uses, because the switch that
// would use them was set off.
func (c *Config) unusedWarnings(w *warnings) {
	t := c.TLS
	if c.Listen.PulsarTLS == "" && c.Admin.ListenHTTPS == "" && (t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != "") {
		w.add("tls", "certificate files are set but listen.pulsarTLS and admin.listenHTTPS are empty: no TLS listener uses them")
	}
	if t.ClientCAFile != "" && t.ClientAuth == "none" {
		w.add("tls.clientCAFile", "set but tls.clientAuth is none: clients are not asked for a certificate, so the tls auth method has none to read")
	}
	if b := c.Broker.TLS; !b.Enabled && (b.TrustCertsFile != "" || b.CertFile != "") {
		w.add("broker.tls", "files are set but broker.tls.enabled is false: brokers are dialled in plaintext")
	}
	if key := firstSet(c.Auth.Enabled, tokenKeys(c.Auth.Token)...); key != "" {
		w.add(key, "set but auth.enabled is false: clients are not authenticated")
	}
	if c.Authz.PolicyFile != "" && !c.Authz.Enabled {
		w.add("authz.policyFile", "set but authz.enabled is false: the policy is not applied")
	}
	if c.Auth.Basic.CredentialsFile != "" && !c.Auth.Enabled {
		w.add("auth.basic.credentialsFile", "set but auth.enabled is false: clients are not authenticated")
	}
	if a := c.Listen.Advertised; !c.Admin.Enabled && (a.Pulsar != "" || a.PulsarTLS != "" || a.HTTP != "" || a.HTTPS != "") {
		w.add("listen.advertised", "set but admin.enabled is false: the proxy answers no HTTP lookup, the only answer that carries these URLs")
	}
	if pp := c.ProxyProtocol; !pp.Enabled && len(pp.TrustedCIDRs) > 0 {
		w.add("proxyProtocol.trustedCIDRs", "set but proxyProtocol.enabled is false: PROXY headers are refused from every source")
	}
}

// adminWarnings are the admin API's: on, but with no broker web service it could reach, or
// with HTTP-lookup clients it cannot route.
func (c *Config) adminWarnings(w *warnings) {
	if !c.Admin.Enabled {
		return
	}
	if d := c.Discovery; len(d.Static.Brokers) > 0 && len(d.Static.WebBrokers) == 0 && d.Consul.Service == "" && d.DNS.Name == "" && d.MetadataStore.URL == "" {
		w.add("discovery.static.webBrokers", "empty with the admin API on (admin.enabled), so no broker web service is known and admin requests are answered 502; list the brokers' web service URLs there, or set admin.enabled: false")
	}
	if c.Auth.ForwardClientCredentials {
		w.add("auth.forwardClientCredentials", "on with the admin API on: a client that looks topics up over HTTP (an http:// or https:// service URL) is told the proxy's URLs, but its producers and consumers are refused, since a routed session speaks with the proxy's credentials (docs/routed-sessions.md); give such clients a pulsar:// service URL")
	}
	if len(c.Broker.AllowedWebPorts) == 0 {
		w.add("broker.allowedWebPorts", "empty with the admin API on (admin.enabled), so no broker web service is used; admin requests reach admin.functionWorkers only, others are answered 502")
	}
}

// loopbackAddr: a listen address (host:port) that only this host can reach. An empty host
// (":6650") listens on every address; a name other than localhost is taken as reachable.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isLoopback(host)
}
