package proxy

import (
	"net"
	"net/http"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/adminproxy"
)

// advertise names the proxy's listeners for the answer to an HTTP lookup: each
// listen.advertised.* URL where set, else the host the client named in its request (so the
// client comes back the way it came) with the port that listener is bound to; none for a
// listener that is off.
func (p *Proxy) advertise(r *http.Request) adminproxy.Advertised {
	a, bound := p.cfg.Listen.Advertised, p.Addrs()
	host := requestHost(r)
	or := func(set, scheme, addr string) string {
		switch {
		case set != "":
			return set
		case addr == "":
			return ""
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return ""
		}
		return scheme + "://" + net.JoinHostPort(host, port)
	}
	return adminproxy.Advertised{
		Pulsar:    or(a.Pulsar, "pulsar", bound.Pulsar),
		PulsarTLS: or(a.PulsarTLS, "pulsar+ssl", bound.PulsarTLS),
		HTTP:      or(a.HTTP, "http", bound.HTTP),
		HTTPS:     or(a.HTTPS, "https", bound.HTTPS),
	}
}

// requestHost is the host a client named in its request (Host, without its port), else the
// address it reached. A Host that is not a plain name or IP address is not echoed.
func requestHost(r *http.Request) string {
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	if h != "" && strings.Trim(strings.ToLower(h), "abcdefghijklmnopqrstuvwxyz0123456789.-") == "" {
		return h
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if hh, _, err := net.SplitHostPort(la.String()); err == nil {
			return hh
		}
	}
	return "localhost"
}
