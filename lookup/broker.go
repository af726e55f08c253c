// Package lookup knows where the brokers are: discovery providers, the live broker set
// shared by lookups and direct-mode target checks, and the proxy's pooled connections to
// brokers over which lookups are asked.
package lookup

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Broker is one broker's binary-protocol endpoint as discovery knows it.
type Broker struct {
	URL  string // pulsar://host:port or pulsar+ssl://host:port
	Host string // lower-cased host name or IP literal, without brackets
	Port string
	TLS  bool
}

// Addr is the host:port to dial.
func (b Broker) Addr() string { return net.JoinHostPort(b.Host, b.Port) }

// ParseBrokerURL parses a discovery or lookup-answer URL of the form pulsar://host:port
// (or pulsar+ssl://). Paths, users and queries are refused: they have no meaning for a
// broker endpoint and would only widen what a target check has to reason about.
func ParseBrokerURL(raw string) (Broker, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Broker{}, fmt.Errorf("broker URL %q: %v", raw, err)
	}
	var tls bool
	switch u.Scheme {
	case "pulsar":
	case "pulsar+ssl":
		tls = true
	default:
		return Broker{}, fmt.Errorf("broker URL %q: scheme must be pulsar or pulsar+ssl", raw)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Broker{}, fmt.Errorf("broker URL %q: only scheme://host:port is allowed", raw)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" || port == "" {
		return Broker{}, fmt.Errorf("broker URL %q: host and port are required", raw)
	}
	return Broker{URL: raw, Host: strings.ToLower(host), Port: port, TLS: tls}, nil
}

// ParseTarget parses a client's proxy_to_broker_url. Clients send "host:port" (the Java and
// Go clients both do); a pulsar:// URL is accepted too.
func ParseTarget(raw string) (host, port string, err error) {
	if strings.Contains(raw, "://") {
		b, err := ParseBrokerURL(raw)
		if err != nil {
			return "", "", err
		}
		return b.Host, b.Port, nil
	}
	host, port, err = net.SplitHostPort(raw)
	if err != nil || host == "" || port == "" {
		return "", "", fmt.Errorf("target %q is not host:port", raw)
	}
	return strings.ToLower(host), port, nil
}
