package edge

// ReasonOpaque: a stream the proxy relays unread (the SNI plane's TLS, which ends at the
// broker) while a policy is in force: nothing of it could be checked against the policy.
const ReasonOpaque Reason = "opaque_under_policy"

// Opaque decides on a connection whose bytes the proxy relays without reading them (the SNI
// plane): no identity, no command, no topic. With a policy in force it is refused, since the
// policy could not be applied to anything in it (configuration refuses the combination too;
// this keeps the rule in the one place every plane asks). Without one it goes on, and the
// broker authenticates and authorizes the client itself.
func (e *Edge) Opaque() Decision {
	if e.Policed() {
		return Decision{Outcome: Close, Reason: ReasonOpaque,
			Message: "pulsar-proxy: authz.enabled: the topic policy cannot be applied to TLS relayed unread (listen.pulsarSNI)"}
	}
	return Decision{Outcome: Forward}
}
