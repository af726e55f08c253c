// Package authz decides what an authenticated role may do: the reloadable policy (grants on
// topics, namespaces and tenants, per-role limits) and Pulsar's topic and namespace name rules
// it is applied with. Who the client is is package authn's.
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
	// ActionAdmin changes what the cluster holds: creating, deleting or reconfiguring topics,
	// namespaces and tenants and their policies, and the Functions API. Granted on topics by
	// a rule's resources like the others; on a namespace only by a rule that covers all of
	// it (tenant/namespace/*), on a tenant by one that covers all of that (tenant/*/*).
	ActionAdmin Action = "admin"
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
			case ActionLookup, ActionProduce, ActionConsume, ActionAdmin:
			default:
				return nil, fmt.Errorf("policy: rules[%d]: unknown action %q (lookup, produce, consume, admin)", i, a)
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

// AllowedInNamespace reports whether role may do action on some topic of namespace ns
// ("tenant/namespace", read as ParseNamespace reads it): whether any rule could grant it
// there. A namespace's topic list is filtered topic by topic; this decides whether the role
// may ask for the list at all.
func (p *Policy) AllowedInNamespace(role string, action Action, ns string) bool {
	return p.namespaceGrant(role, action, ns, true, func(string) bool { return true })
}

// AllowedOnNamespace reports whether role may do action on namespace ns as a whole: a rule
// grants it whose resource covers every topic of the namespace in both domains
// (tenant/namespace/*, no domain).
func (p *Policy) AllowedOnNamespace(role string, action Action, ns string) bool {
	return p.namespaceGrant(role, action, ns, false, func(topic string) bool { return topic == "*" })
}

// AllowedOnTenant reports whether role may do action on tenant as a whole: a rule grants it
// whose resource covers every namespace and topic of the tenant (tenant/*/*, no domain).
func (p *Policy) AllowedOnTenant(role string, action Action, tenant string) bool {
	if p.IsSuperUser(role) {
		return true
	}
	if !isNamedEntity(tenant) {
		return false
	}
	for _, res := range p.resourcesFor(role, action) {
		if t, ns, topic, ok := splitResource(res, false); ok && ns == "*" && topic == "*" && match(t, tenant) {
			return true
		}
	}
	return false
}

// namespaceGrant looks for a rule of role and action whose resource names namespace ns and
// whose topic glob topicOK accepts; domain-qualified resources count when withDomain.
func (p *Policy) namespaceGrant(role string, action Action, ns string, withDomain bool, topicOK func(string) bool) bool {
	if p.IsSuperUser(role) {
		return true
	}
	n, err := ParseNamespace(ns)
	if err != nil {
		return false
	}
	for _, res := range p.resourcesFor(role, action) {
		t, nsGlob, topic, ok := splitResource(res, withDomain)
		if ok && match(t, n.Tenant) && match(nsGlob, n.Namespace) && topicOK(topic) {
			return true
		}
	}
	return false
}

// resourcesFor lists the resources of the rules that grant action to role.
func (p *Policy) resourcesFor(role string, action Action) []string {
	var out []string
	for _, r := range p.Rules {
		if slices.Contains(r.Actions, action) && matchAny(r.Roles, role) {
			out = append(out, r.Resources...)
		}
	}
	return out
}

// splitResource splits a rule's resource into its tenant, namespace and topic globs; a
// domain-qualified one only when withDomain.
func splitResource(res string, withDomain bool) (tenant, ns, topic string, ok bool) {
	if _, rest, hasDomain := strings.Cut(res, "://"); hasDomain {
		if !withDomain {
			return "", "", "", false
		}
		res = rest
	}
	parts := strings.Split(res, "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
