package edge

import (
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	rlog "github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
)

// Command decides on one client command of type t (peeked from its bytes). A direct
// session's hot path (SEND, ACK, FLOW, PING...) is decided without decoding; everything else
// is read strictly (required fields included) before anything is decided.
func (e *Edge) Command(id authn.Identity, p Plane, t pb.BaseCommand_Type, command []byte) Decision {
	given := p
	p = p.acting(t)
	r := ruleFor(t)
	if p == Direct && (r == pass || r == keepAlive) {
		return Decision{Outcome: Forward}
	}
	if given == Multiplexed && r == pass && frame.CanonicalCommand(t, command) {
		// A multiplexed session's hot path (SEND, ACK, FLOW...): bytes already in the one
		// form decide would re-encode them to go as they are (a routed session decodes
		// every command: it routes by what it reads).
		return Decision{Outcome: Forward}
	}
	cmd, err := frame.Decode(command)
	if err != nil {
		// Nothing of it can be authorized: AuthorizationError, and the session ends.
		return closing(ReasonUndecodable, frame.Error(0, pb.ServerError_AuthorizationError,
			"pulsar-proxy: cannot read "+t.String()+": "+err.Error()))
	}
	return e.decide(id, p, r, cmd)
}

// Frame decides on a whole frame: the command, and on a multiplexed session a SEND's payload
// section, which a broker may have to read (an encrypted namespace's, a chunk's) and closes the
// shared connection on when it cannot.
func (e *Edge) Frame(id authn.Identity, p Plane, t pb.BaseCommand_Type, command, payload []byte) Decision {
	d := e.Command(id, p, t, command) // with the plane as given: Command tells routed from multiplexed
	if p.acting(t) != Multiplexed || t != pb.BaseCommand_SEND || d.Outcome != Forward {
		return d
	}
	if err := frame.CheckSendPayload(payload); err != nil {
		return closing(ReasonUndecodable, frame.Error(0, pb.ServerError_AuthorizationError, "pulsar-proxy: cannot read SEND's message: "+err.Error()))
	}
	return d
}

// Decoded decides on a command the session has read decoded already (a lookup connection
// reads its commands so).
func (e *Edge) Decoded(id authn.Identity, p Plane, cmd *pb.BaseCommand) Decision {
	return e.decide(id, p.acting(cmd.GetType()), ruleFor(cmd.GetType()), cmd)
}

func (e *Edge) decide(id authn.Identity, p Plane, r rule, cmd *pb.BaseCommand) Decision {
	t := cmd.GetType()
	if p == Lookup && !servedOnLookup[t] {
		return refusal(ReasonType, frame.Error(requestID(cmd), pb.ServerError_NotAllowedError,
			"pulsar-proxy: "+t.String()+" is not served on a lookup connection; connect with proxy_to_broker_url set to the owning broker"))
	}
	if r == refuse {
		return closing(ReasonType, frame.Error(0, pb.ServerError_NotAllowedError,
			"pulsar-proxy: "+t.String()+" may not be sent on "+connectionOf(p)))
	}
	if !hasOwnMessage(cmd) {
		if p == Lookup {
			return refusal(ReasonUndecodable, frame.Error(0, pb.ServerError_MetadataError, "pulsar-proxy: "+t.String()+" without its command"))
		}
		return closing(ReasonUndecodable, frame.Error(0, pb.ServerError_AuthorizationError, "pulsar-proxy: "+t.String()+" without its command"))
	}
	switch r {
	case keepAlive:
		return keepingAlive(p, t)
	}
	canon := canonical(cmd)
	switch r {
	case pass:
		// A multiplexed session: the broker gets what Go's strict reading made of it, each
		// field once, so a reader that parses repeated or nested fields otherwise (a broker
		// that closes the shared connection on what it cannot read) sees the same command.
		return Decision{Outcome: Forward, Command: canon, Rewritten: true}
	case renewal:
		if p == Direct {
			return Decision{Outcome: Forward, Command: canon, Rewritten: true, Renewal: true}
		}
		return Decision{Outcome: Answer, Command: canon, Renewal: true}
	case listTopics:
		return e.topicList(id, p, canon)
	}
	return e.topics(id, p, canon)
}

// keepingAlive answers PING and PONG where the proxy is the client's peer; on a direct
// session they go on (the broker is the client's peer).
func keepingAlive(p Plane, t pb.BaseCommand_Type) Decision {
	switch {
	case p == Direct:
		return Decision{Outcome: Forward}
	case t == pb.BaseCommand_PING:
		return Decision{Outcome: Answer, Reply: frame.Pong()}
	}
	return Decision{Outcome: Answer}
}

// topics decides on a command that names topics: each must be allowed, and a discovery
// request must be within the role's lookup rate.
func (e *Edge) topics(id authn.Identity, p Plane, cmd *pb.BaseCommand) Decision {
	if p == Lookup {
		forLookupService(cmd) // a lookup connection's own requests: the fields are dropped
	} else if hasOriginalFields(cmd) {
		return closing(ReasonForged, FailureFor(cmd, pb.ServerError_NotAllowedError,
			"pulsar-proxy: clients may not set original_principal or original_auth_*; only a proxy sets them"))
	}
	check := topicChecks[cmd.GetType()]
	topics := check.topics(cmd)
	if len(topics) == 0 {
		topics = []string{""} // a command naming no topic is checked as the empty name: denied
	}
	for _, topic := range topics {
		if !e.mayTopic(id, check.action, topic) {
			return e.denied(cmd, id, check.action, topic)
		}
	}
	if d, limited := e.overRate(id, cmd); limited {
		return d
	}
	e.metrics.Forwarded(check.action)
	return Decision{Outcome: Forward, Command: cmd, Rewritten: true, Action: check.action, Resource: topics[0]}
}

// topicList decides on opening (or closing) a namespace's topic list: the role must hold a
// lookup grant somewhere in the namespace. With a policy the client's topics_hash never
// reaches a broker: the broker answers "unchanged" when the hash matches the full list, so
// a client could test guesses of the names the filter hides. The broker then sends the
// whole list, which is filtered and hashed anew (TopicLists).
func (e *Edge) topicList(id authn.Identity, p Plane, cmd *pb.BaseCommand) Decision {
	if p == Lookup {
		forLookupService(cmd)
	}
	var ns string
	switch cmd.GetType() {
	case pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
		return Decision{Outcome: Forward, Command: cmd, Rewritten: true}
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		g := cmd.GetGetTopicsOfNamespace()
		ns = g.GetNamespace()
		if e.Policed() {
			g.TopicsHash = nil
		}
	case pb.BaseCommand_WATCH_TOPIC_LIST:
		w := cmd.GetWatchTopicList()
		ns = w.GetNamespace()
		if e.Policed() {
			w.TopicsHash = nil
		}
	}
	if p := e.currentPolicy(); p != nil && !p.AllowedInNamespace(id.Role, authz.ActionLookup, ns) {
		msg := denyMessage(id.Role, authz.ActionLookup, "topics of namespace "+ns)
		e.deny(authz.ActionLookup, msg)
		return Decision{Outcome: Refuse, Reason: ReasonDenied, Action: authz.ActionLookup, Resource: ns, Command: cmd,
			Reply: FailureFor(cmd, pb.ServerError_AuthorizationError, msg)}
	}
	if d, limited := e.overRate(id, cmd); limited {
		return d
	}
	return Decision{Outcome: Forward, Command: cmd, Rewritten: true, Action: authz.ActionLookup, Resource: ns}
}

// mayTopic asks the policy in force; without a policy everything is allowed.
func (e *Edge) mayTopic(id authn.Identity, a authz.Action, topic string) bool {
	p := e.currentPolicy()
	return p == nil || p.Allowed(id.Role, a, topic)
}

// Visible reports whether the role may see topic in a topic list.
func (e *Edge) Visible(id authn.Identity, topic string) bool {
	return e.mayTopic(id, authz.ActionLookup, topic)
}

func (e *Edge) denied(cmd *pb.BaseCommand, id authn.Identity, a authz.Action, topic string) Decision {
	msg := denyMessage(id.Role, a, topic)
	e.deny(a, msg)
	return Decision{Outcome: Refuse, Reason: ReasonDenied, Action: a, Resource: topic, Command: cmd,
		Reply: FailureFor(cmd, pb.ServerError_AuthorizationError, msg)}
}

// deny counts a denial of the policy, and tells the log's summaries of it (msg names the
// role and the resource).
func (e *Edge) deny(a authz.Action, msg string) {
	e.metrics.Denied(a)
	if e.refusals != nil {
		e.refusals.Refused(rlog.Denied, string(a), "", msg)
	}
}

// overRate takes a token of the role's lookup rate for a discovery request.
func (e *Edge) overRate(id authn.Identity, cmd *pb.BaseCommand) (Decision, bool) {
	if !rateLimited[cmd.GetType()] || e.rates.allow(id.Role, e.currentPolicy()) {
		return Decision{}, false
	}
	return Decision{Outcome: Refuse, Reason: ReasonRateLimited, Command: cmd,
		Reply: FailureFor(cmd, pb.ServerError_TooManyRequests, rateMessage(id.Role))}, true
}

func denyMessage(role string, a authz.Action, resource string) string {
	return "pulsar-proxy: role " + QuoteRole(role) + " may not " + string(a) + " " + resource
}

func rateMessage(role string) string {
	return "pulsar-proxy: role " + QuoteRole(role) + " is over its lookup rate, retry later"
}

// QuoteRole writes a role for a message: "(anonymous)" for none, on one line.
func QuoteRole(r string) string {
	if r == "" {
		return "(anonymous)"
	}
	return strings.ReplaceAll(r, "\n", " ")
}

func connectionOf(p Plane) string {
	if p == Multiplexed {
		return "a multiplexed connection"
	}
	return "a connection to a broker"
}

func requestID(cmd *pb.BaseCommand) uint64 {
	id, _ := frame.RequestID(cmd)
	return id
}

func refusal(why Reason, reply *pb.BaseCommand) Decision {
	return Decision{Outcome: Refuse, Reason: why, Reply: reply}
}

func closing(why Reason, reply *pb.BaseCommand) Decision {
	return Decision{Outcome: Close, Reason: why, Reply: reply}
}
