package edge

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// roleLimits counts, per role, what the policy's limits bound (authz.Limit) where sessions
// are counted: the role's live sessions on every plane that holds one (binary connections,
// WebSocket sessions), and a publish rate shared by all of them. A role is in the table
// while it has a session. (Its lookup rate is lookupRates, applied on every plane.)
type roleLimits struct {
	mu    sync.Mutex
	roles map[string]*roleUse
}

// roleUse is one role's use; its limiters follow the policy in force (a reload that changes
// the role's limit retunes them).
type roleUse struct {
	sessions int
	policy   *authz.Policy // the policy the limit was read from
	limit    authz.Limit
	publish  *rate.Limiter // nil: not limited
}

func newRoleLimits() *roleLimits { return &roleLimits{roles: map[string]*roleUse{}} }

// acquire counts a new session of role under policy p. It reports false, counting nothing,
// when the role is at its connection limit (or, limited, finds the table full); otherwise
// release must be called at the end. Only roles the policy limits are counted (a reload that
// limits a role counts its sessions from then on).
func (r *roleLimits) acquire(role string, p *authz.Policy) (release func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.roles[role]
	if u == nil {
		if l := p.LimitFor(role); l.MaxConnections <= 0 && l.PublishBytesPerSecond <= 0 {
			return func() {}, true // nothing to count: the role is not in the table
		}
		if len(r.roles) >= maxTrackedRoles {
			return nil, false // a limited role must not go unlimited because the table is full
		}
		u = &roleUse{}
		r.roles[role] = u
	}
	u.follow(role, p)
	if u.limit.MaxConnections > 0 && u.sessions >= u.limit.MaxConnections {
		if u.sessions == 0 {
			delete(r.roles, role)
		}
		return nil, false
	}
	u.sessions++
	return func() { r.release(role) }, true
}

func (r *roleLimits) release(role string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u := r.roles[role]; u != nil {
		if u.sessions--; u.sessions <= 0 {
			delete(r.roles, role)
		}
	}
}

// follow reads the role's limit from p when p is not the policy it was read from.
func (u *roleUse) follow(role string, p *authz.Policy) {
	if p == nil || p == u.policy {
		return
	}
	u.policy = p
	l := p.LimitFor(role)
	if l.PublishBytesPerSecond != u.limit.PublishBytesPerSecond {
		u.publish = nil
		if l.PublishBytesPerSecond > 0 {
			// A second's worth at once, and never less than a chunk of a large frame.
			u.publish = rate.NewLimiter(rate.Limit(l.PublishBytesPerSecond), max(int(l.PublishBytesPerSecond), publishChunk))
		}
	}
	u.limit = l
}

// publishChunk is the most one wait of the publish pacing asks for; larger writes wait in
// chunks.
const publishChunk = 64 << 10

// pacer returns the role's publish rate, or nil when its publishing is not limited.
func (r *roleLimits) pacer(role string, p *authz.Policy) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.roles[role]
	if u == nil {
		return nil
	}
	u.follow(role, p)
	return u.publish
}

// Pace waits until l allows n more bytes, in chunks within its burst; it returns how long
// it waited, or early when ctx ends.
func Pace(ctx context.Context, l *rate.Limiter, n int) time.Duration {
	began := time.Now()
	for n > 0 {
		k := min(n, l.Burst())
		if l.WaitN(ctx, k) != nil {
			break
		}
		n -= k
	}
	return time.Since(began)
}

// AcquireSession counts a new session of role against its connection limit
// (authz.Limit.MaxConnections), shared by every plane. It reports false, counting nothing,
// when the role is at the limit; otherwise release must be called when the session ends. A
// client without a role, or a proxy without a policy, is not counted.
func (e *Edge) AcquireSession(role string) (release func(), ok bool) {
	p := e.currentPolicy()
	if role == "" || p == nil {
		return func() {}, true
	}
	return e.roles.acquire(role, p)
}

// PublishRate is role's publish rate (authz.Limit.PublishBytesPerSecond), shared by all of
// its sessions on every plane; nil when its publishing is not limited. Wait on it with Pace.
func (e *Edge) PublishRate(role string) *rate.Limiter {
	p := e.currentPolicy()
	if role == "" || p == nil || !limitsPublishing(p) {
		return nil
	}
	return e.roles.pacer(role, p)
}

// limitsPublishing reports whether any of p's limits sets a publish rate. Asked for every
// SEND of a policed session: without such a limit (the usual policy) the answer takes no
// lock, where the roles' table is one lock every session's SENDs would take.
func limitsPublishing(p *authz.Policy) bool {
	for _, l := range p.Limits {
		if l.PublishBytesPerSecond > 0 {
			return true
		}
	}
	return false
}
