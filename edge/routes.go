package edge

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// The HTTP plane's decisions: every route of the brokers' REST API the proxy lets a role
// use names an action on a resource, as a Pulsar frame does. The table (routetable.go) is an
// allow-list; a route it does not know is for superusers only.

// scope is what a route's resource is.
type scope uint8

const (
	onTopic       scope = iota // {domain}/{tenant}/{namespace}/{topic}
	onNamespace                // {tenant}/{namespace}, the namespace as a whole
	inNamespace                // {tenant}/{namespace}: something within it (a filtered topic list, its metadata)
	onTenant                   // {tenant} as a whole
	forSuperusers              // nobody else
)

// route is one entry of the table: a method, a path pattern (segments; "{name}" matches one
// non-empty segment and names it, "{domain}" only persistent or non-persistent, "**" the
// rest of the path, however long), and what it needs.
type route struct {
	method string
	path   []string
	action authz.Action
	scope  scope
	// lists: the answer is a JSON array of topic names, filtered for the role.
	lists bool
	// decodedTwice: the broker decodes {topic} as a path segment, then with Codec.decode.
	decodedTwice bool
	// discovery: a lookup the role's lookup rate counts, as its binary form is (LOOKUP,
	// PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA).
	discovery bool
}

// Route decides on a request of the HTTP plane, given its method and URL as received (the
// path is matched segment by segment on its escaped form, each segment then decoded, so a
// %2F stays inside the name it was written in, as the broker reads it).
func (e *Edge) Route(id authn.Identity, method string, u *url.URL) Decision {
	p := e.currentPolicy()
	if p == nil || p.IsSuperUser(id.Role) {
		return Decision{Outcome: Forward}
	}
	segs, ok := segments(u)
	if !ok {
		return e.refuseRoute(id, http.StatusForbidden, "", "", "pulsar-proxy: the path "+u.EscapedPath()+" cannot be read as one resource")
	}
	rt, params, found := match(method, segs)
	if !found || rt.scope == forSuperusers {
		return e.refuseRoute(id, http.StatusForbidden, "", "",
			"pulsar-proxy: "+method+" "+u.EscapedPath()+" is not a route the proxy's policy knows; only superusers may use it")
	}
	resource, allowed := e.routeGrant(p, id, rt, params)
	if !allowed {
		msg := denyMessage(id.Role, rt.action, resource)
		e.deny(rt.action, msg)
		return e.refuseRoute(id, http.StatusForbidden, rt.action, resource, msg)
	}
	if rt.discovery && !e.rates.allow(id.Role, p) {
		return e.refuseRoute(id, http.StatusTooManyRequests, rt.action, resource, rateMessage(id.Role))
	}
	if rt.action == authz.ActionProduce || rt.action == authz.ActionConsume {
		e.metrics.Forwarded(rt.action)
	}
	return Decision{Outcome: Forward, Action: rt.action, Resource: resource, FilterTopics: rt.lists}
}

// KnownRoute reports whether the table has an entry for a request (one for superusers only
// included): a route the proxy's clients use that is not known is one nobody decided on.
func KnownRoute(method string, u *url.URL) bool {
	segs, ok := segments(u)
	if !ok {
		return false
	}
	_, _, found := match(method, segs)
	return found
}

// routeGrant names the route's resource and asks the policy for it.
func (e *Edge) routeGrant(p *authz.Policy, id authn.Identity, rt *route, params map[string]segment) (string, bool) {
	ns := params["tenant"].decoded + "/" + params["namespace"].decoded
	switch rt.scope {
	case onTopic:
		domain := params["domain"].decoded
		if domain == "" {
			domain = authz.DomainPersistent // a schema's route names no domain
		}
		local, ok := topicOf(rt, params)
		topic := domain + "://" + ns + "/" + local
		return topic, ok && p.Allowed(id.Role, rt.action, topic)
	case onNamespace:
		return ns, p.AllowedOnNamespace(id.Role, rt.action, ns)
	case inNamespace:
		return ns, p.AllowedInNamespace(id.Role, rt.action, ns)
	}
	return params["tenant"].decoded, p.AllowedOnTenant(id.Role, rt.action, params["tenant"].decoded)
}

func (e *Edge) refuseRoute(id authn.Identity, status int, a authz.Action, resource, msg string) Decision {
	return Decision{Outcome: Refuse, Reason: reasonOfStatus(status), Status: status, Action: a, Resource: resource, Message: msg}
}

func reasonOfStatus(status int) Reason {
	if status == http.StatusTooManyRequests {
		return ReasonRateLimited
	}
	return ReasonDenied
}

// segment is one segment of a request path, as written and decoded.
type segment struct{ raw, decoded string }

// segments splits the escaped path and decodes each segment alone. A segment that does not
// decode, or carries a matrix parameter (";"), is not read: JAX-RS would take it apart
// otherwise than the table does.
func segments(u *url.URL) ([]segment, bool) {
	raw := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	if n := len(raw); n > 1 && raw[n-1] == "" {
		raw = raw[:n-1] // a trailing slash
	}
	out := make([]segment, len(raw))
	for i, s := range raw {
		d, err := url.PathUnescape(s)
		if err != nil || s == "" || strings.ContainsRune(d, ';') {
			return nil, false
		}
		out[i] = segment{s, d}
	}
	return out, true
}

// topicOf is the local name a broker reads from a route's {topic} segment. The brokers decode
// it with Java's URLDecoder (Pulsar's Codec.decode), which also reads '+' as a space: the topic
// routes take the segment still encoded (@Encoded), the schema routes take it decoded once by
// JAX-RS and then decode it again (AdminResource.validateTopicName), so "x%252Fy" is "x/y" there.
func topicOf(rt *route, params map[string]segment) (string, bool) {
	seg := params["topic"]
	in := seg.raw
	if rt.decodedTwice {
		in = seg.decoded
	}
	name, err := url.QueryUnescape(in)
	return name, err == nil
}

// match finds the route of a request, and the values of its pattern's parameters.
func match(method string, segs []segment) (*route, map[string]segment, bool) {
	for i := range routeTable {
		rt := &routeTable[i]
		if rt.method != method {
			continue
		}
		if params, ok := matchPath(rt.path, segs); ok {
			return rt, params, true
		}
	}
	return nil, nil, false
}

func matchPath(pattern []string, segs []segment) (map[string]segment, bool) {
	params := map[string]segment{}
	for i, p := range pattern {
		if p == "**" {
			return params, true
		}
		if i >= len(segs) {
			return nil, false
		}
		switch d := segs[i].decoded; {
		case p == "{domain}":
			if d != authz.DomainPersistent && d != authz.DomainNonPersistent {
				return nil, false
			}
			params["domain"] = segs[i]
		case strings.HasPrefix(p, "{"):
			params[strings.Trim(p, "{}")] = segs[i]
		case p != d:
			return nil, false
		}
	}
	return params, len(pattern) == len(segs)
}
