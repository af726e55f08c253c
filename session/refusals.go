package session

import (
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
)

// Refusals is where the sessions report the clients they turn away, for the log's summaries
// (refusal.Summary).
type Refusals interface {
	Refused(k refusal.Kind, detail, remote, told string)
}

// refusalOf is the kind of refusal a close reason is, and its detail; ok is false for
// reasons that are not a refusal (a client that left, a drain, a broker gone mid-session).
func (s *session) refusalOf(r CloseReason) (k refusal.Kind, detail string, ok bool) {
	switch r {
	case ReasonAuthFailed:
		return refusal.AuthFailed, string(s.authReason), true
	case ReasonBadFrame, ReasonExpectedConnect, ReasonForgedProxyFields, ReasonCommandRefused:
		return refusal.BadFrame, string(r), true
	case ReasonTLSOnPlaintext:
		return refusal.TLSOnPlaintext, "", true
	case ReasonTooManyFromIP, ReasonConnectRate, ReasonTooManyForRole, ReasonTooManyConnections, ReasonDescriptors:
		return refusal.ConnectionLimit, string(r), true
	case ReasonTargetNotAllowed:
		return refusal.Denied, string(r), true
	case ReasonBrokerUnreachable, ReasonBrokerRefused, ReasonBrokerPorts:
		return refusal.BrokerUnavailable, s.broker, true
	}
	return "", "", false
}

// reportRefusal tells the log's summaries of a session that ended before it was served.
func (s *session) reportRefusal(r CloseReason) {
	k, detail, ok := s.refusalOf(r)
	if !ok || s.srv.cfg.Refusals == nil {
		return
	}
	s.srv.cfg.Refusals.Refused(k, detail, s.conn.RemoteAddr().String(), s.told)
}
