package authz

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts the policy's decisions (denials, commands checked and forwarded) and its
// reloads.
type Metrics struct {
	denials       *prometheus.CounterVec
	policyReloads *prometheus.CounterVec
	forwarded     *prometheus.CounterVec
}

// NewMetrics registers the authorization metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_authorization_denials_total",
			Help: "Commands refused by the proxy's authorization policy, by action.",
		}, []string{"action"}),
		policyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_policy_reloads_total",
			Help: "Authorization policy loads, by result (ok, error).",
		}, []string{"result"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_authorized_commands_total",
			Help: "PRODUCER (produce) and SUBSCRIBE (consume) commands checked at the proxy and forwarded to a broker, by action.",
		}, []string{"action"}),
	}
	reg.MustRegister(m.denials, m.policyReloads, m.forwarded)
	// The series exist from the start, at 0, so a rate() in an alert counts the first event
	// too.
	for _, a := range []Action{ActionLookup, ActionProduce, ActionConsume, ActionAdmin} {
		m.denials.WithLabelValues(string(a))
	}
	for _, a := range []Action{ActionProduce, ActionConsume} {
		m.forwarded.WithLabelValues(string(a))
	}
	for _, r := range []string{"ok", "error"} {
		m.policyReloads.WithLabelValues(r)
	}
	return m
}

// Denied counts one command refused by the policy.
func (m *Metrics) Denied(a Action) {
	if m == nil {
		return
	}
	m.denials.WithLabelValues(string(a)).Inc()
}

// Forwarded counts one PRODUCER (produce) or SUBSCRIBE (consume) that passed the policy and
// went on to a broker.
func (m *Metrics) Forwarded(a Action) {
	if m == nil {
		return
	}
	m.forwarded.WithLabelValues(string(a)).Inc()
}
