package authz

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Action is what a role wants to do with a topic.
type Action string

const (
	ActionLookup  Action = "lookup"
	ActionProduce Action = "produce"
	ActionConsume Action = "consume"
)

// Policy is a parsed authorization policy: superusers may do anything; everyone else may do
// what a rule grants, and nothing else (deny by default).
type Policy struct {
	SuperUserRoles []string `yaml:"superUserRoles"`
	Rules          []Rule   `yaml:"rules"`
	Limits         []Limit  `yaml:"limits"` // what each role may use (see Limit)
}

// Rule grants actions on resources to roles. Roles and resources are globs ("*" within a
// path segment). A resource is "tenant/namespace/topic" (any domain) or
// "persistent://tenant/namespace/topic" / "non-persistent://…" (that domain only).
type Rule struct {
	Roles     []string `yaml:"roles"`
	Resources []string `yaml:"resources"`
	Actions   []Action `yaml:"actions"`
}

// ParsePolicy reads a policy document, refusing unknown keys, bad globs and unknown actions.
func ParsePolicy(b []byte) (*Policy, error) {
	var p Policy
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	for i, r := range p.Rules {
		if len(r.Roles) == 0 || len(r.Resources) == 0 || len(r.Actions) == 0 {
			return nil, fmt.Errorf("policy: rules[%d]: roles, resources and actions are all required", i)
		}
		for _, g := range append(slices.Clone(r.Roles), r.Resources...) {
			if _, err := path.Match(g, ""); err != nil {
				return nil, fmt.Errorf("policy: rules[%d]: bad glob %q", i, g)
			}
		}
		for _, res := range r.Resources {
			if _, rest, ok := strings.Cut(res, "://"); ok {
				d, _, _ := strings.Cut(res, "://")
				if d != "persistent" && d != "non-persistent" {
					return nil, fmt.Errorf("policy: rules[%d]: resource %q: unknown domain %q", i, res, d)
				}
				res = rest
			}
			if parts := strings.Split(res, "/"); len(parts) != 3 || slices.Contains(parts, "") {
				return nil, fmt.Errorf("policy: rules[%d]: resource %q is not tenant/namespace/topic", i, res)
			}
		}
		for _, a := range r.Actions {
			switch a {
			case ActionLookup, ActionProduce, ActionConsume:
			default:
				return nil, fmt.Errorf("policy: rules[%d]: unknown action %q (lookup, produce, consume)", i, a)
			}
		}
	}
	if err := validateLimits(p.Limits); err != nil {
		return nil, err
	}
	return &p, nil
}

// IsSuperUser reports whether role may do anything.
func (p *Policy) IsSuperUser(role string) bool {
	return slices.Contains(p.SuperUserRoles, role)
}

// Allowed reports whether role may do action on topic (a full or short Pulsar topic name).
// The name is read as the broker reads it (ParseTopic); a name the broker would refuse, a
// legacy tenant/cluster/namespace/topic name and a name that is not UTF-8 are denied. A rule
// matches the name tenant/namespace/local, or, for a partition, its partitioned topic's.
func (p *Policy) Allowed(role string, action Action, topic string) bool {
	if p.IsSuperUser(role) {
		return true
	}
	tn, err := ParseTopic(topic)
	if err != nil {
		return false
	}
	ns := tn.Tenant + "/" + tn.Namespace + "/"
	name, base := ns+tn.Local, ns+tn.Base
	for _, r := range p.Rules {
		if !slices.Contains(r.Actions, action) || !matchAny(r.Roles, role) {
			continue
		}
		for _, res := range r.Resources {
			d, pattern, hasDomain := strings.Cut(res, "://")
			if !hasDomain {
				pattern = res
			} else if d != tn.Domain {
				continue
			}
			if match(pattern, name) || (tn.Partition >= 0 && match(pattern, base)) {
				return true
			}
		}
	}
	return false
}

func matchAny(globs []string, s string) bool {
	for _, g := range globs {
		if match(g, s) {
			return true
		}
	}
	return false
}

func match(glob, s string) bool {
	ok, _ := path.Match(glob, s)
	return ok
}
