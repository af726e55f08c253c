// Package connlimit decides whether the proxy takes a client connection: how many one client
// IP may hold at once (PerIP), how fast one IP may open them (Rate), and how many file
// descriptors the clients of each listener may hold at all (Budget), so that a flood on one
// listener cannot take the descriptors that the other listeners, broker connections and
// reloads need. Listener applies all of them as a listener accepts, for listeners that read no
// PROXY header (the HTTP plane); the Pulsar listeners apply PerIP and Rate in the session,
// after the PROXY header and TLS, when the client's real address is known.
package connlimit

import (
	"net"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// PerIP counts live client connections per client (see Key), so that one address cannot take
// every connection the proxy will accept. It holds only clients with a live connection, so its
// size is bounded by the number of open connections.
type PerIP struct {
	max      int              // per client; 0 = unlimited (still counted, for the gauge)
	v6Prefix int              // IPv6 clients are counted per prefix of this many bits
	active   prometheus.Gauge // distinct clients held

	mu    sync.Mutex
	count map[netip.Addr]int
}

// NewPerIP counts connections per client, at most max each (0: no limit); v6Prefix is the
// prefix length an IPv6 client is counted by (0: DefaultIPv6PrefixLength).
func NewPerIP(max, v6Prefix int, active prometheus.Gauge) *PerIP {
	if v6Prefix == 0 {
		v6Prefix = DefaultIPv6PrefixLength
	}
	return &PerIP{max: max, v6Prefix: v6Prefix, active: active, count: map[netip.Addr]int{}}
}

// Acquire takes a connection slot for addr's client. It reports false, holding nothing, when
// that client is at the limit; otherwise release must be called once the connection ends. An
// address without an IP (a pipe, a unix socket) is not counted.
func (c *PerIP) Acquire(addr net.Addr) (release func(), ok bool) {
	ip, hasIP := Key(addr, c.v6Prefix)
	if !hasIP {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.count[ip]
	if c.max > 0 && n >= c.max {
		return nil, false
	}
	c.count[ip] = n + 1
	if n == 0 {
		c.active.Inc()
	}
	return func() { c.release(ip) }, true
}

func (c *PerIP) release(ip netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count[ip] <= 1 {
		delete(c.count, ip)
		c.active.Dec()
		return
	}
	c.count[ip]--
}

// clientIP is addr's IP, IPv4-mapped IPv6 unmapped so that both spellings of one client
// share a count.
func clientIP(addr net.Addr) (netip.Addr, bool) {
	var ap netip.AddrPort
	if ta, ok := addr.(*net.TCPAddr); ok {
		ap = ta.AddrPort()
	} else if addr != nil {
		ap, _ = netip.ParseAddrPort(addr.String())
	}
	if !ap.Addr().IsValid() {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

// DefaultIPv6PrefixLength is how many leading bits of an IPv6 address per-IP limits count a
// client by when nothing says otherwise: a /64 is what one site or one host is usually given.
const DefaultIPv6PrefixLength = 64

// Key is what the per-IP limits count a client by: its IPv4 address, or its IPv6 address
// masked to v6Prefix bits. An IPv6 client typically holds a whole /64 and could otherwise take
// a fresh address for every connection.
func Key(addr net.Addr, v6Prefix int) (netip.Addr, bool) {
	ip, ok := clientIP(addr)
	if !ok || ip.Is4() {
		return ip, ok
	}
	if p, err := ip.Prefix(v6Prefix); err == nil {
		return p.Addr(), true
	}
	return ip, true
}
