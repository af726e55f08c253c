package authz

import (
	"fmt"
	"path"
)

// Limit bounds what each role it names may use at the proxy, so that one tenant's clients
// cannot take what the others need: connections, lookups, publish bandwidth. A zero field
// is no limit. The first limit of the policy whose roles match a role applies to it;
// superusers are limited too when a limit names them.
type Limit struct {
	Roles []string `yaml:"roles"`
	// MaxConnections: live client connections of the role, all sessions together (binary
	// connections and WebSocket sessions).
	MaxConnections int `yaml:"maxConnections"`
	// LookupsPerSecond: the role's lookup-mode requests (LOOKUP, PARTITIONED_METADATA,
	// GET_TOPICS_OF_NAMESPACE, GET_SCHEMA) per second, with bursts of LookupBurst (default:
	// the rate, at least 1); beyond it a request is answered TooManyRequests, which clients
	// retry.
	LookupsPerSecond float64 `yaml:"lookupsPerSecond"`
	LookupBurst      int     `yaml:"lookupBurst"`
	// PublishBytesPerSecond: what the role's clients send in direct sessions and WebSocket
	// producers (their payloads), all together; beyond it the proxy stops reading from them
	// for a while (backpressure: nothing is dropped, their sends slow down).
	PublishBytesPerSecond float64 `yaml:"publishBytesPerSecond"`
}

// Limited reports whether the limit bounds anything.
func (l Limit) Limited() bool {
	return l.MaxConnections > 0 || l.LookupsPerSecond > 0 || l.PublishBytesPerSecond > 0
}

// LimitFor is the limit that applies to role: the first whose roles match it; the zero Limit
// when none does.
func (p *Policy) LimitFor(role string) Limit {
	for _, l := range p.Limits {
		if matchAny(l.Roles, role) {
			return l
		}
	}
	return Limit{}
}

func validateLimits(limits []Limit) error {
	for i, l := range limits {
		if len(l.Roles) == 0 {
			return fmt.Errorf("policy: limits[%d]: roles is required", i)
		}
		for _, g := range l.Roles {
			if _, err := path.Match(g, ""); err != nil {
				return fmt.Errorf("policy: limits[%d]: bad glob %q", i, g)
			}
		}
		if l.MaxConnections < 0 || l.LookupsPerSecond < 0 || l.LookupBurst < 0 || l.PublishBytesPerSecond < 0 {
			return fmt.Errorf("policy: limits[%d]: limits are 0 (none) or greater", i)
		}
		if !l.Limited() {
			return fmt.Errorf("policy: limits[%d]: sets no limit (maxConnections, lookupsPerSecond, publishBytesPerSecond)", i)
		}
	}
	return nil
}
