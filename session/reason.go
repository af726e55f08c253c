package session

// CloseReason says why a client connection ended. It is a metric label and a log field, so
// the set is fixed and small.
type CloseReason string

const (
	ReasonClientClosed       CloseReason = "client_closed"
	ReasonBrokerClosed       CloseReason = "broker_closed"
	ReasonIOError            CloseReason = "io_error"
	ReasonHandshakeTimeout   CloseReason = "handshake_timeout"
	ReasonExpectedConnect    CloseReason = "expected_connect"
	ReasonBadFrame           CloseReason = "bad_frame"
	ReasonForgedProxyFields  CloseReason = "forged_proxy_fields"
	ReasonTargetNotAllowed   CloseReason = "target_not_allowed"
	ReasonBrokerUnreachable  CloseReason = "broker_unreachable"
	ReasonBrokerPorts        CloseReason = "broker_ports_exhausted" // no local port left to dial the broker from
	ReasonBrokerRefused      CloseReason = "broker_refused"
	ReasonKeepAliveTimeout   CloseReason = "keepalive_timeout"
	ReasonTooManyConnections CloseReason = "too_many_connections"
	ReasonDescriptors        CloseReason = "descriptor_budget" // the Pulsar listeners' part of the descriptor budget was spent
	ReasonTooManyFromIP      CloseReason = "too_many_connections_per_ip"
	ReasonConnectRate        CloseReason = "connection_rate_per_ip"
	ReasonTooManyForRole     CloseReason = "too_many_connections_per_role"
	ReasonShutdown           CloseReason = "shutdown" // still open at the drain deadline
	ReasonDrained            CloseReason = "drained"  // handed over on drain (see session.drain)
	ReasonAuthFailed         CloseReason = "authentication_failed"
	ReasonAuthExpired        CloseReason = "credentials_expired"
	ReasonTransportSetup     CloseReason = "transport_setup_failed" // TLS handshake or PROXY header
	ReasonCommandRefused     CloseReason = "command_refused"        // a direct-mode command the client rules refuse
	ReasonClientStalled      CloseReason = "client_stalled"         // sent part of a frame, then nothing for session.stallTimeout
	ReasonClientNotReading   CloseReason = "client_not_reading"     // took nothing the broker sent for session.stallTimeout, or (lookup mode) no answer for keepAliveInterval
	ReasonBrokerStalled      CloseReason = "broker_stalled"         // the broker, likewise
	ReasonSlowConsumer       CloseReason = "slow_consumer"          // multiplexed: its outbound queue went over its bound
	ReasonTLSOnPlaintext     CloseReason = "tls_on_plaintext_port"  // a TLS ClientHello on a plaintext Pulsar listener
)

// closeReasons is every CloseReason, for the metrics made at start (see Metrics.initSeries).
var closeReasons = []CloseReason{
	ReasonClientClosed, ReasonBrokerClosed, ReasonIOError, ReasonHandshakeTimeout, ReasonExpectedConnect,
	ReasonBadFrame, ReasonForgedProxyFields, ReasonTargetNotAllowed, ReasonBrokerUnreachable, ReasonBrokerPorts,
	ReasonBrokerRefused, ReasonKeepAliveTimeout, ReasonTooManyConnections, ReasonTooManyFromIP,
	ReasonConnectRate, ReasonShutdown, ReasonDrained, ReasonAuthFailed, ReasonAuthExpired,
	ReasonTransportSetup, ReasonCommandRefused, ReasonTooManyForRole, ReasonClientStalled,
	ReasonClientNotReading, ReasonBrokerStalled, ReasonSlowConsumer, ReasonDescriptors, ReasonTLSOnPlaintext,
}

// beforeSession reports whether the reason ended the connection before it was usable, which
// is what handshake-failure metrics count.
func (r CloseReason) beforeSession() bool {
	switch r {
	case ReasonHandshakeTimeout, ReasonExpectedConnect, ReasonForgedProxyFields, ReasonAuthFailed,
		ReasonTargetNotAllowed, ReasonBrokerUnreachable, ReasonBrokerPorts, ReasonBrokerRefused, ReasonTooManyConnections, ReasonDescriptors, ReasonTooManyFromIP, ReasonConnectRate, ReasonTooManyForRole, ReasonTransportSetup,
		ReasonTLSOnPlaintext:
		return true
	}
	return false
}
