package authn

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts refused authentications and the renewals of clients' credentials.
type Metrics struct {
	authFailures *prometheus.CounterVec
	refreshes    *prometheus.CounterVec
}

// NewMetrics registers the authentication metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_authentication_failures_total",
			Help: "Client authentications refused, by auth method and reason.",
		}, []string{"method", "reason"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_credential_refreshes_total",
			Help: "Client credential renewals: after the proxy's own AUTH_CHALLENGE (ok, failed), or answers to a broker's challenge relayed to it (relayed).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.authFailures, m.refreshes)
	// The series exist from the start, at 0, so a rate() in an alert counts the first event
	// too and a dashboard shows 0 rather than no data: the refresh results, and each method
	// with the reasons it can fail for (not every method times every reason).
	for _, r := range []string{"ok", "failed", "relayed"} {
		m.refreshes.WithLabelValues(r)
	}
	for method, reasons := range failureReasons {
		for _, r := range reasons {
			m.authFailures.WithLabelValues(method, string(r))
		}
	}
	return m
}

// failureReasons are the reasons each method of pulsar_proxy_authentication_failures_total
// fails for, as the providers report them; "other" is a method the proxy does not serve.
var failureReasons = map[string][]Reason{
	methodToken: {ReasonExpired, ReasonNotYetValid, ReasonBadSignature, ReasonMalformed, ReasonBadAudience,
		ReasonBadIssuer, ReasonUnknownKey, ReasonNoRole, ReasonNoCredentials, ReasonRefreshTimeout},
	"tls":   {ReasonNoCertificate, ReasonNoRole, ReasonRefreshTimeout},
	"none":  {ReasonNoCredentials, ReasonUnknownMethod},
	"other": {ReasonUnknownMethod},
}

// AuthFailure counts one refused authentication.
func (m *Metrics) AuthFailure(method string, reason Reason) {
	if m == nil {
		return
	}
	switch method { // a client-chosen string: keep the label set bounded
	case methodToken, "tls", "none", "anonymous", methodBasic:
	default:
		method = "other"
	}
	m.authFailures.WithLabelValues(method, string(reason)).Inc()
}

// RelayedAuthResponse counts a client's AUTH_RESPONSE to a broker's challenge, passed on.
func (m *Metrics) RelayedAuthResponse() {
	if m == nil {
		return
	}
	m.refreshes.WithLabelValues("relayed").Inc()
}

// Refreshed counts one renewal of a client's credentials (ok false: the session was closed).
func (m *Metrics) Refreshed(ok bool) {
	if m == nil {
		return
	}
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.refreshes.WithLabelValues(result).Inc()
}

// JWKSMetrics describes the identity provider's key set: fetches, keys and freshness.
type JWKSMetrics struct {
	fetches     *prometheus.CounterVec
	keys        prometheus.Gauge
	lastSuccess prometheus.Gauge
}

// NewJWKSMetrics registers the key set metrics with reg (only when a JWKS is configured).
func NewJWKSMetrics(reg prometheus.Registerer) *JWKSMetrics {
	m := &JWKSMetrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_jwks_fetches_total",
			Help: "Fetches of the identity provider's key set (JWKS), by result (ok, error).",
		}, []string{"result"}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_jwks_keys",
			Help: "Signature keys in the key set in force.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_jwks_last_success_timestamp_seconds",
			Help: "Unix time of the last successful key set fetch (0: none yet).",
		}),
	}
	reg.MustRegister(m.fetches, m.keys, m.lastSuccess)
	m.fetches.WithLabelValues("ok") // both results exist from the start, at 0
	m.fetches.WithLabelValues("error")
	return m
}

func (m *JWKSMetrics) fetched(ok bool, set *keySet) {
	if m == nil {
		return
	}
	if !ok {
		m.fetches.WithLabelValues("error").Inc()
		return
	}
	m.fetches.WithLabelValues("ok").Inc()
	m.keys.Set(float64(len(set.byKID)))
	m.lastSuccess.SetToCurrentTime()
}
