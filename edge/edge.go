// Package edge is the proxy's one decision point: given who a client is, the plane its
// request arrives on and the command or route, it decides whether the request goes on,
// is answered by the proxy itself, or is refused, and why. Every plane asks it (a lookup
// connection, a framed direct session, a multiplexed one, the HTTP plane), so there is one
// copy of each check: the authorization policy, the refusal of fields only a proxy sets,
// the strict reading of what a broker will act on, a role's lookup rate, and what a topic
// list may show.
package edge

import (
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	rlog "github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
)

// Plane is where a request arrives.
type Plane uint8

const (
	// Lookup: a connection without proxy_to_broker_url; the proxy answers discovery
	// requests itself from its broker control connections.
	Lookup Plane = iota
	// Direct: a framed direct session, the client's own connection to its broker.
	Direct
	// Multiplexed: a direct session over a broker connection shared with other clients of
	// the same principal (broker.multiplex); one bad command must not cost the neighbours.
	Multiplexed
	// HTTP: the admin REST API, lookups over HTTP, the REST producer and Functions.
	HTTP
	// Routed: a connection without proxy_to_broker_url whose client uses the proxy as its
	// broker (it looked its topics up over HTTP): discovery requests are decided as on a
	// lookup connection, everything else as on a multiplexed one (its producers and consumers
	// go to their topics' owners over shared broker connections).
	Routed
	// WebSocket: Pulsar's WebSocket API, whose producers and consumers the proxy makes at
	// brokers itself (the role as original_principal).
	WebSocket
	planes
)

// acting is the plane whose rules decide a command of type t arriving on p: a routed
// connection's discovery requests are a lookup connection's, its other commands a
// multiplexed connection's.
func (p Plane) acting(t pb.BaseCommand_Type) Plane {
	switch {
	case p != Routed:
		return p
	case servedOnLookup[t] && t != pb.BaseCommand_PING && t != pb.BaseCommand_PONG && t != pb.BaseCommand_AUTH_RESPONSE:
		return Lookup
	}
	return Multiplexed
}

// ServedOnLookup reports whether a lookup connection serves commands of type t (a routed
// connection serves them the same way).
func ServedOnLookup(t pb.BaseCommand_Type) bool { return servedOnLookup[t] }

// String is the plane as a log field.
func (p Plane) String() string {
	switch p {
	case Lookup:
		return "lookup"
	case Direct:
		return "direct"
	case Multiplexed:
		return "multiplexed"
	case HTTP:
		return "http"
	case Routed:
		return "routed"
	case WebSocket:
		return "websocket"
	}
	return "unknown"
}

// Outcome is what becomes of a request.
type Outcome uint8

const (
	// Forward: send it on (to the broker; on a lookup connection, through the lookup service).
	Forward Outcome = iota
	// Answer: the proxy answers it itself (Decision.Reply, when not nil) and sends nothing on.
	Answer
	// Refuse: answered with Decision.Reply (or Status on HTTP); the session goes on.
	Refuse
	// Close: answered with Decision.Reply, then the session ends: the command cannot be
	// read as the broker would read it, or no client sends it on this plane.
	Close
)

// String is the outcome as a test and log label.
func (o Outcome) String() string {
	return [...]string{"forward", "answer", "refuse", "close"}[o]
}

// Reason is why a request was refused: a metric label, so the set is fixed and small.
type Reason string

const (
	ReasonDenied      Reason = "denied"           // the policy does not grant the action
	ReasonRateLimited Reason = "rate_limited"     // over the role's lookup rate
	ReasonType        Reason = "type_not_allowed" // a command no client sends on this plane
	ReasonUndecodable Reason = "undecodable"      // not a command the proxy can read strictly
	ReasonForged      Reason = "forged_proxy_fields"
	ReasonIncomplete  Reason = "incomplete" // the command lacks its own sub-message
)

// PolicySource returns the authorization policy in force (it may change between calls).
type PolicySource interface {
	Policy() *authz.Policy
}

// Config sets the edge up.
type Config struct {
	// Policy is the authorization policy; nil: the proxy authorizes nothing itself (every
	// action is allowed, brokers decide), but commands are still read strictly.
	Policy  PolicySource
	Metrics *authz.Metrics // denials by action; nil: not counted
	// Refusals is told of every denial, for the log's summaries; nil: not.
	Refusals Refusals
	// Now is the clock of the lookup rates; nil: time.Now.
	Now func() time.Time
}

// Edge decides for every plane; build it with New. Safe for concurrent use.
type Edge struct {
	policy   PolicySource
	metrics  *authz.Metrics
	refusals Refusals
	rates    *lookupRates
	roles    *roleLimits
}

// Refusals is where the edge reports its denials (refusal.Summary).
type Refusals interface {
	Refused(k rlog.Kind, detail, remote, told string)
}

// New builds the decision point.
func New(cfg Config) *Edge {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Edge{policy: cfg.Policy, metrics: cfg.Metrics, refusals: cfg.Refusals, rates: newLookupRates(now), roles: newRoleLimits()}
}

// Decision is the edge's answer for one request.
type Decision struct {
	Outcome Outcome
	Reason  Reason // why, when refused
	// Action and Resource are what was checked ("" when nothing was): a topic, a
	// namespace (tenant/namespace) or a tenant.
	Action   authz.Action
	Resource string

	// The binary planes.

	// Command is the client's command as decoded (nil where the rule forwards it undecoded).
	Command *pb.BaseCommand
	// Rewritten: forward Command re-encoded instead of the client's bytes, so the broker
	// reads exactly what was checked (the type and its own sub-message, nothing else).
	Rewritten bool
	// Renewal: an AUTH_RESPONSE; the session's refresher takes it when it asked for one.
	Renewal bool
	// Reply is what the proxy answers: the refusal (the command's own failure form where
	// it has one), or its own answer (PONG); nil: nothing.
	Reply *pb.BaseCommand

	// The HTTP plane.

	// Status is the HTTP status of a refusal (403, 429, ...); 0 when forwarded.
	Status int
	// Message is a refusal's reason for a human, as the client is told it.
	Message string
	// FilterTopics: the answer is a JSON list of topic names, to be cut to those the role
	// may look up (Visible) before it reaches the client.
	FilterTopics bool
}

// Policed reports whether a policy is in force (the proxy then filters topic lists).
func (e *Edge) Policed() bool { return e != nil && e.policy != nil }

// currentPolicy is the policy in force, nil without one.
func (e *Edge) currentPolicy() *authz.Policy {
	if e == nil || e.policy == nil {
		return nil
	}
	return e.policy.Policy()
}

// Policy is the authorization policy in force, nil without one (the limits it sets are
// applied where connections and bytes are counted).
func (e *Edge) Policy() *authz.Policy { return e.currentPolicy() }
