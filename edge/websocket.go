package edge

import (
	"net/http"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// WebSocket decides on opening a session of the WebSocket API: a producer needs produce on
// its topic, a consumer or a reader consume, as a broker would check them (a partition of a
// partitioned topic is granted by the partitioned topic's rules). Opening one looks the
// topic up at a broker, so it takes a token of the role's lookup rate, as a lookup does. A
// refusal carries the HTTP status of the upgrade's answer (403, 429) and its message.
func (e *Edge) WebSocket(id authn.Identity, a authz.Action, topic string) Decision {
	if a != authz.ActionProduce && a != authz.ActionConsume {
		return Decision{Outcome: Refuse, Reason: ReasonType, Status: http.StatusForbidden, Action: a, Resource: topic,
			Message: "pulsar-proxy: a WebSocket session produces or consumes, it cannot " + string(a)}
	}
	p := e.currentPolicy()
	if p != nil && !p.Allowed(id.Role, a, topic) {
		msg := denyMessage(id.Role, a, topic)
		e.deny(a, msg)
		return Decision{Outcome: Refuse, Reason: ReasonDenied, Status: http.StatusForbidden, Action: a, Resource: topic,
			Message: msg}
	}
	if !e.rates.allow(id.Role, p) {
		return Decision{Outcome: Refuse, Reason: ReasonRateLimited, Status: http.StatusTooManyRequests, Action: a, Resource: topic,
			Message: rateMessage(id.Role)}
	}
	e.metrics.Forwarded(a)
	return Decision{Outcome: Forward, Action: a, Resource: topic}
}
