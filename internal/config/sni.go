package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// validateSNI checks the SNI plane and refuses what cannot work with it: its TLS ends at the
// broker, so the proxy sees no frame of it. Authentication and the topic policy at the proxy
// would not apply to its clients (who could then go around them on this listener), and only
// discovery's TLS URLs name the ports it relays to.
func (c *Config) validateSNI(p *problems) {
	s, l := c.SNI, c.Listen
	p.between("sni.maxClientHelloBytes", s.MaxClientHelloBytes, 512, 1<<20)
	p.oneOf("sni.proxyProtocol", s.ProxyProtocol, "off", "v1", "v2")
	for i, name := range s.ServiceNames {
		if err := checkServiceName(name); err != nil {
			p.bad(fmt.Sprintf("sni.serviceNames[%d]", i), "%q: %v (want the DNS name clients put in their service URL, e.g. pulsar.example.com)", name, err)
		}
	}
	if l.PulsarSNI == "" {
		return
	}
	p.listenAddr("listen.pulsarSNI", l.PulsarSNI)
	if !strings.HasSuffix(l.PulsarSNI, ":0") {
		for key, other := range map[string]string{"listen.pulsar": l.Pulsar, "listen.pulsarTLS": l.PulsarTLS, "listen.http": l.HTTP, "admin.listenHTTPS": c.Admin.ListenHTTPS} {
			if other == l.PulsarSNI {
				p.bad("listen.pulsarSNI", "same address as %s (%q)", key, other)
			}
		}
	}
	if !c.Broker.TLS.Enabled {
		p.bad("listen.pulsarSNI", "needs broker.tls.enabled: true: SNI connections go to the brokers' TLS ports, which discovery names only then (pulsar+ssl:// URLs)")
	}
	if c.Auth.Enabled {
		p.bad("listen.pulsarSNI", "cannot be on with auth.enabled: the SNI plane relays TLS that ends at the broker, so the proxy cannot authenticate those clients nor name them to brokers (original_principal); they would go around the proxy's authentication. Run the SNI listener on a proxy of its own, with brokers that authenticate clients themselves (docs/sni.md)")
	}
	if c.Authz.Enabled {
		p.bad("listen.pulsarSNI", "cannot be on with authz.enabled: the topic policy cannot be applied to TLS the proxy does not read, and SNI clients would go around it (docs/sni.md)")
	}
}

// checkServiceName accepts a server name as a client would send it: a DNS name in lower case
// (server names are compared lower-cased), no IP literal (RFC 6066).
func checkServiceName(name string) error {
	if _, err := netip.ParseAddr(name); err == nil || strings.Contains(name, ":") {
		return fmt.Errorf("an IP address is never sent as a server name")
	}
	if name != strings.ToLower(name) {
		return fmt.Errorf("write it in lower case")
	}
	return brokerhost.CheckHost(name)
}

// sniWarnings say what the SNI plane cannot do, since it relays TLS it does not read (the
// combinations that cannot work are refused by validation), and note sni settings nothing
// uses.
func (c *Config) sniWarnings(w *warnings) {
	s := c.SNI
	if c.Listen.PulsarSNI == "" {
		if len(s.ServiceNames) > 0 || s.ProxyProtocol != "off" {
			w.add("sni", "settings are set but listen.pulsarSNI is empty: no SNI listener uses them")
		}
		return
	}
	w.add("listen.pulsarSNI", "TLS relayed unread: the brokers authenticate and authorize these clients themselves; the proxy applies no topic policy, no per-role limit and names no original_principal for them, and sees no topic (docs/sni.md)")
	if len(s.ServiceNames) == 0 {
		w.add("sni.serviceNames", "empty: a client's first connection (its lookup, to the service URL's host) is refused unless that host is a broker's own name")
	}
	if s.ProxyProtocol != "off" {
		w.add("sni.proxyProtocol", "%s: the header goes ahead of the client's TLS; Pulsar's brokers read theirs inside TLS and fail such a handshake, so this is only for something on the brokers' TLS ports that reads a header before TLS", s.ProxyProtocol)
	}
}
