package connlimit

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate limits how fast one client IP may open connections (a token bucket per IP), so a
// client in a reconnect loop, or one address hammering the proxy, is refused before it costs a
// broker connection, a lookup or an HTTP request. The IP must be the real one: where a PROXY
// header is trusted, the header's, known only once the transport is prepared.
//
// Its table is bounded: an IP whose bucket has refilled carries no state worth keeping (a new
// bucket starts full), so such entries are swept; and when maxTrackedIPs are tracked, a new IP
// is let through untracked rather than refused, since refusing would let a flood of distinct
// addresses lock everyone out.
type Rate struct {
	perSecond rate.Limit
	burst     int
	v6Prefix  int // IPv6 clients share a bucket per prefix of this many bits (see Key)
	now       func() time.Time

	mu        sync.Mutex
	limiters  map[netip.Addr]*rate.Limiter
	nextSweep time.Time
}

const (
	maxTrackedIPs = 100_000
	sweepEvery    = 10 * time.Second
)

// NewRate allows perSecond new connections per client IP with burst at once; it returns nil
// (no limit) when perSecond is 0. v6Prefix as for NewPerIP.
func NewRate(perSecond float64, burst, v6Prefix int) *Rate {
	if perSecond <= 0 {
		return nil
	}
	if v6Prefix == 0 {
		v6Prefix = DefaultIPv6PrefixLength
	}
	return &Rate{perSecond: rate.Limit(perSecond), burst: max(burst, 1), v6Prefix: v6Prefix, now: time.Now,
		limiters: map[netip.Addr]*rate.Limiter{}}
}

// Allow takes a token for a new connection from addr's client; false means refuse it. A nil
// Rate allows everything.
func (c *Rate) Allow(addr net.Addr) bool {
	if c == nil {
		return true
	}
	ip, ok := Key(addr, c.v6Prefix)
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
func (c *Rate) sweep(now time.Time) {
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
