package edge

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// maxTrackedRoles bounds the tables of lookup rates and of role limits, which hold only
// roles the policy limits. Roles come only from credentials the proxy accepted, so a sane
// cluster has far fewer. Past the bound a new role's lookups go unlimited (the table is swept
// of full buckets first), while its sessions are refused: a role limited in what it holds
// must not go unlimited because ten thousand others are busy.
const maxTrackedRoles = 10_000

// lookupRates is each role's lookup rate (authz.Limit.LookupsPerSecond), one bucket per role
// shared by every plane: lookup connections, direct and multiplexed sessions, HTTP /lookup.
type lookupRates struct {
	now func() time.Time

	mu    sync.Mutex
	roles map[string]*roleRate
}

// roleRate is one role's bucket and the limit it was made for (a reload that changes the
// limit makes a new one).
type roleRate struct {
	perSecond float64
	burst     int
	l         *rate.Limiter
}

func newLookupRates(now func() time.Time) *lookupRates {
	return &lookupRates{now: now, roles: map[string]*roleRate{}}
}

// allow takes a token of role's lookup rate under policy p; false means over it. A client
// without a role (no authentication) and a role without a rate are not limited.
func (r *lookupRates) allow(role string, p *authz.Policy) bool {
	if role == "" || p == nil {
		return true
	}
	lim := p.LimitFor(role)
	if lim.LookupsPerSecond <= 0 {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	u := r.roles[role]
	if u == nil || u.perSecond != lim.LookupsPerSecond || u.burst != lim.LookupBurst {
		if u == nil && len(r.roles) >= maxTrackedRoles && !r.sweepLocked(now) {
			return true
		}
		burst := max(lim.LookupBurst, int(lim.LookupsPerSecond), 1)
		u = &roleRate{perSecond: lim.LookupsPerSecond, burst: lim.LookupBurst, l: rate.NewLimiter(rate.Limit(lim.LookupsPerSecond), burst)}
		r.roles[role] = u
	}
	return u.l.AllowN(now, 1)
}

// sweepLocked forgets the roles whose bucket is full again: a fresh bucket is the same. It
// reports whether any room was made.
func (r *lookupRates) sweepLocked(now time.Time) bool {
	n := len(r.roles)
	for role, u := range r.roles {
		if u.l.TokensAt(now) >= float64(u.l.Burst()) {
			delete(r.roles, role)
		}
	}
	return len(r.roles) < n
}
