package session

import (
	"net"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// clientIPs counts live client connections per client IP, so that one address cannot take
// every connection the proxy will accept. It holds only addresses with a live connection,
// so its size is bounded by the number of open connections.
type clientIPs struct {
	max    int              // per IP; 0 = unlimited (still counted, for the gauge)
	active prometheus.Gauge // distinct IPs held

	mu    sync.Mutex
	count map[netip.Addr]int
}

func newClientIPs(max int, active prometheus.Gauge) *clientIPs {
	return &clientIPs{max: max, active: active, count: map[netip.Addr]int{}}
}

// acquire takes a connection slot for addr's IP. It reports false, holding nothing, when
// that IP is at the limit; otherwise release must be called once the connection ends.
// An address without an IP (a pipe, a unix socket) is not counted.
func (c *clientIPs) acquire(addr net.Addr) (release func(), ok bool) {
	ip, hasIP := clientIP(addr)
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

func (c *clientIPs) release(ip netip.Addr) {
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
