// Package brokers is the proxy's one view of the brokers it may reach: the broker value (a
// binary endpoint and its web service, in one canonical spelling) and the live set over
// discovery that lookups pick from and direct-mode targets and admin redirects are checked
// against, so that what is looked up and what may be dialled can never disagree.
package brokers

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
	// anything here: Set checks it (see checkWeb) and its live brokers carry only web URLs
	// that passed, in WebURL's spelling.
	Web string
	// WebHost is a second host Web may be on besides Host: the host of the registration's own
	// pulsarServiceUrl when Host is an advertised listener's (whose web service is named after
	// the broker's default address, not the listener's). Set by the provider that read it.
	WebHost string
	// WebByOperator marks a Web the operator wrote (discovery.static.webBrokers): the host rule
	// does not apply to it, the port and scheme rules do. Set by the static provider only.
	WebByOperator bool
}

// SameEndpoints reports whether two brokers are the same for the live set: the same binary URL
// and the same web service. Providers use it too, to log only a list that changed.
func SameEndpoints(a, b Broker) bool { return a.URL == b.URL && a.Web == b.Web }

// WebURL is the canonical spelling of a broker web service URL: scheme://host:port, the host
// lower-cased and an IPv6 literal in brackets.
func WebURL(tls bool, host, port string) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// ParseWebURL checks a web service URL from configuration or discovery and returns it in
// its canonical spelling (WebURL).
func ParseWebURL(raw string) (string, error) {
	tls, host, port, err := brokerhost.ParseWebURL(raw)
	if err != nil {
		return "", fmt.Errorf("web service URL %q: %v", raw, err)
	}
	return WebURL(tls, host, port), nil
}

// Addr is the host:port to dial.
func (b Broker) Addr() string { return net.JoinHostPort(b.Host, b.Port) }

// ParseURL parses a discovery or lookup-answer URL of the form pulsar://host:port
// (or pulsar+ssl://). Paths, users and queries are refused: they have no meaning for a
// broker endpoint and would only widen what a target check has to reason about. The host
// must be a DNS name or an IP literal and the port plain decimal (see brokerhost).
func ParseURL(raw string) (Broker, error) {
	tls, host, port, err := brokerhost.ParseURL(raw)
	if err != nil {
		return Broker{}, fmt.Errorf("broker URL %q: %v", raw, err)
	}
	return Broker{URL: raw, Host: host, Port: port, TLS: tls}, nil
}

// ParseTarget parses a client's proxy_to_broker_url. Clients send "host:port" (the Java and
// Go clients both do); a pulsar:// URL is accepted too. Host and port are checked as in
// ParseURL, so a target can only name what a broker URL could.
func ParseTarget(raw string) (host, port string, err error) {
	if strings.Contains(raw, "://") {
		b, err := ParseURL(raw)
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
