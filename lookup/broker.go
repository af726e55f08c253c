// Package lookup knows where the brokers are: discovery providers, the live broker set
// shared by lookups and direct-mode target checks, and the proxy's pooled connections to
// brokers over which lookups are asked.
package lookup

import (
	"fmt"
	"net"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// Broker is one broker's binary-protocol endpoint as discovery knows it.
type Broker struct {
	URL  string // pulsar://host:port or pulsar+ssl://host:port
	Host string // lower-cased host name or IP literal, without brackets
	Port string
	TLS  bool
	// Web is the broker's web service (admin REST API, Functions worker) as discovery named
	// it, scheme://host:port; "" when discovery does not know it. A registry's entry may hold
	// anything here: BrokerSet checks it (see checkWeb) and its live brokers carry only web
	// URLs that passed, in WebURL's spelling.
	Web string
	// webHost is a second host Web may be on besides Host: the host of the registration's own
	// pulsarServiceUrl when Host is an advertised listener's (whose web service is named after
	// the broker's default address, not the listener's).
	webHost string
	// webByOperator marks a Web the operator wrote (discovery.static.webBrokers): the host rule
	// does not apply to it, the port and scheme rules do.
	webByOperator bool
}

// sameEndpoints reports whether two brokers are the same for the live set: the same binary URL
// and the same web service.
func sameEndpoints(a, b Broker) bool { return a.URL == b.URL && a.Web == b.Web }

// WebURL is the canonical spelling of a broker web service URL: scheme://host:port, the host
// lower-cased and an IPv6 literal in brackets.
func WebURL(tls bool, host, port string) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// parseWebURL checks a web service URL from configuration or discovery and returns it in
// its canonical spelling (WebURL).
func parseWebURL(raw string) (string, error) {
	tls, host, port, err := brokerhost.ParseWebURL(raw)
	if err != nil {
		return "", fmt.Errorf("web service URL %q: %v", raw, err)
	}
	return WebURL(tls, host, port), nil
}

// Addr is the host:port to dial.
func (b Broker) Addr() string { return net.JoinHostPort(b.Host, b.Port) }

// parseBrokerURL parses a discovery or lookup-answer URL of the form pulsar://host:port
// (or pulsar+ssl://). Paths, users and queries are refused: they have no meaning for a
// broker endpoint and would only widen what a target check has to reason about. The host
// must be a DNS name or an IP literal and the port plain decimal (see brokerhost).
func parseBrokerURL(raw string) (Broker, error) {
	tls, host, port, err := brokerhost.ParseURL(raw)
	if err != nil {
		return Broker{}, fmt.Errorf("broker URL %q: %v", raw, err)
	}
	return Broker{URL: raw, Host: host, Port: port, TLS: tls}, nil
}

// ParseTarget parses a client's proxy_to_broker_url. Clients send "host:port" (the Java and
// Go clients both do); a pulsar:// URL is accepted too. Host and port are checked as in
// parseBrokerURL, so a target can only name what a broker URL could.
func ParseTarget(raw string) (host, port string, err error) {
	if strings.Contains(raw, "://") {
		b, err := parseBrokerURL(raw)
		if err != nil {
			return "", "", err
		}
		return b.Host, b.Port, nil
	}
	host, port, err = brokerhost.SplitHostPort(raw)
	if err != nil {
		return "", "", fmt.Errorf("target %q is not host:port: %v", raw, err)
	}
	return host, port, nil
}
