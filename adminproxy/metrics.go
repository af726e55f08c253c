package adminproxy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the HTTP plane's reverse proxy. Every label value comes from a fixed set: routes
// from classify, codes from net/http's, reasons from the constants below.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	upstream  *prometheus.CounterVec
	redirects prometheus.Counter
	inFlight  prometheus.Gauge
	rejected  *prometheus.CounterVec
	// The request bodies kept on disk for redirects, and their bound.
	spooled, spoolBudget prometheus.Gauge
}

// Reasons of pulsar_proxy_http_upstream_errors_total.
const (
	reasonUnreachable     = "unreachable"        // no connection to the broker's web service
	reasonTimeout         = "timeout"            // the broker did not answer within admin.responseTimeout / requestTimeout
	reasonRedirectRefused = "redirect_refused"   // a Location outside the live set
	reasonTooManyRedirect = "too_many_redirects" // more than admin.maxRedirects
	reasonNoUpstream      = "no_upstream"        // discovery knows no web service
	reasonBroken          = "broken"             // the exchange failed after the connection was made
	reasonBodyNotKept     = "body_not_kept"      // a redirect could not re-send the body
)

// NewMetrics registers the admin proxy's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_http_requests_total",
			Help: "Admin API, lookup and Functions requests through the proxy, by route (the API resource, e.g. /admin/v2/persistent) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pulsar_proxy_http_request_duration_seconds",
			Help:    "Time from a request's headers to the end of its answer, redirects included, by route.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"route"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_http_upstream_errors_total",
			Help: "Admin requests that failed on the broker side, by reason (unreachable, timeout, redirect_refused, too_many_redirects, no_upstream, broken, body_not_kept).",
		}, []string{"reason"}),
		redirects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_proxy_http_redirects_followed_total",
			Help: "Broker redirects (307/308 to the owner of a topic, the leader, another worker) that the proxy followed itself.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_http_requests_in_flight",
			Help: "Admin requests being served now (at most admin.maxConcurrentRequests; more are answered 429).",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_http_requests_rejected_total",
			Help: "Admin requests the proxy turned away or cut off to protect itself, by reason: concurrency (admin.maxConcurrentRequests, 429), concurrency_per_principal (admin.maxConcurrentRequestsPerPrincipal, 429), body_rate (a body below admin.minBodyRate, 408), spool_budget (admin.maxSpooledBytes spent, 503).",
		}, []string{"reason"}),
		spooled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_http_spool_bytes",
			Help: "Bytes of admin request bodies kept on disk now (beyond the first 256 KiB of each), so that a redirect can send them again.",
		}),
		spoolBudget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_http_spool_budget_bytes",
			Help: "The most bytes of request bodies kept on disk at once, all requests together (admin.maxSpooledBytes).",
		}),
	}
	// The reasons are known in advance: their series exist from the start, so a rate() sees
	// the first failure.
	for _, r := range []string{reasonUnreachable, reasonTimeout, reasonRedirectRefused, reasonTooManyRedirect, reasonNoUpstream, reasonBroken, reasonBodyNotKept} {
		m.upstream.WithLabelValues(r)
	}
	for _, r := range []string{rejectConcurrency, rejectPrincipal, rejectBodyRate, rejectSpool} {
		m.rejected.WithLabelValues(r)
	}
	// Every route's series too (about 70 routes): the codes are not known in advance, so a
	// route starts with its 200s at 0, which is enough for a panel or a ratio to have a series.
	for _, route := range routeLabels() {
		m.requests.WithLabelValues(route, "200")
		m.duration.WithLabelValues(route)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.upstream, m.redirects, m.inFlight, m.rejected, m.spooled, m.spoolBudget)
	}
	return m
}

func (m *Metrics) done(route string, code int, seconds float64) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(seconds)
}
