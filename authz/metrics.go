package authz

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts authentication failures, authorization denials and policy reloads.
type Metrics struct {
	authFailures  *prometheus.CounterVec
	denials       *prometheus.CounterVec
	policyReloads *prometheus.CounterVec
}

// NewMetrics registers the authz metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_authentication_failures_total",
			Help: "Client authentications refused, by auth method and reason.",
		}, []string{"method", "reason"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_authorization_denials_total",
			Help: "Commands refused by the proxy's authorization policy, by action.",
		}, []string{"action"}),
		policyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_policy_reloads_total",
			Help: "Authorization policy loads, by result (ok, error).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.authFailures, m.denials, m.policyReloads)
	return m
}

// AuthFailure counts one refused authentication.
func (m *Metrics) AuthFailure(method string, reason Reason) {
	if m == nil {
		return
	}
	switch method { // a client-chosen string: keep the label set bounded
	case MethodToken, "tls", "none", "anonymous":
	default:
		method = "other"
	}
	m.authFailures.WithLabelValues(method, string(reason)).Inc()
}

// Denied counts one command refused by the policy.
func (m *Metrics) Denied(a Action) {
	if m == nil {
		return
	}
	m.denials.WithLabelValues(string(a)).Inc()
}
