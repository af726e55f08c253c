package session

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// connectRate limits how fast one client IP may open connections (a token bucket per IP), so
// a client in a reconnect loop, or one address hammering the proxy, is refused before it
// costs a broker connection or a lookup. The IP is the real one (a PROXY header's), known
// only once the transport is prepared, so the check comes after TLS and the header.
//
// Its table is bounded: an IP whose bucket has refilled carries no state worth keeping (a
// new bucket starts full), so such entries are swept; and when maxTracked IPs are tracked,
// a new IP is let through untracked rather than refused, since refusing would let a flood
// of distinct addresses lock everyone out.
type connectRate struct {
	perSecond rate.Limit
	burst     int
	v6Prefix  int // IPv6 clients share a bucket per prefix of this many bits (see clientKey)
	now       func() time.Time

	mu        sync.Mutex
	limiters  map[netip.Addr]*rate.Limiter
	nextSweep time.Time
}

const (
	maxTrackedIPs = 100_000
	sweepEvery    = 10 * time.Second
)

// newConnectRate returns nil (no limit) when perSecond is 0.
func newConnectRate(perSecond float64, burst, v6Prefix int) *connectRate {
	if perSecond <= 0 {
		return nil
	}
	return &connectRate{perSecond: rate.Limit(perSecond), burst: max(burst, 1), v6Prefix: v6Prefix, now: time.Now,
		limiters: map[netip.Addr]*rate.Limiter{}}
}

// allow takes a token for a new connection from addr's client; false means refuse it.
func (c *connectRate) allow(addr net.Addr) bool {
	if c == nil {
		return true
	}
	ip, ok := clientKey(addr, c.v6Prefix)
	if !ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.sweep(now)
	l := c.limiters[ip]
	if l == nil {
		if len(c.limiters) >= maxTrackedIPs {
			return true
		}
		l = rate.NewLimiter(c.perSecond, c.burst)
		c.limiters[ip] = l
	}
	return l.AllowN(now, 1)
}

// sweep drops the buckets that have refilled, at most once per sweepEvery.
func (c *connectRate) sweep(now time.Time) {
	if now.Before(c.nextSweep) {
		return
	}
	c.nextSweep = now.Add(sweepEvery)
	for ip, l := range c.limiters {
		if l.TokensAt(now) >= float64(c.burst) {
			delete(c.limiters, ip)
		}
	}
}
