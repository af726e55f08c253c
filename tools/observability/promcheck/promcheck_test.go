package promcheck

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const scrape = `# HELP pulsar_proxy_handshake_failures_total x
# TYPE pulsar_proxy_handshake_failures_total counter
pulsar_proxy_handshake_failures_total{reason="authentication_failed"} 3
pulsar_proxy_handshake_failures_total{reason="handshake_timeout"} 0
# HELP pulsar_proxy_lookup_seconds x
# TYPE pulsar_proxy_lookup_seconds histogram
pulsar_proxy_lookup_seconds_bucket{type="LOOKUP",le="0.5"} 1
pulsar_proxy_lookup_seconds_bucket{type="LOOKUP",le="+Inf"} 1
pulsar_proxy_lookup_seconds_sum{type="LOOKUP"} 0.1
pulsar_proxy_lookup_seconds_count{type="LOOKUP"} 1
# HELP pulsar_proxy_ready x
# TYPE pulsar_proxy_ready gauge
pulsar_proxy_ready 1
`

func TestCheckFindsWhatTheProxyDoesNotExport(t *testing.T) {
	e, err := ParseScrape(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q    Query
		want string // "" = no problem
	}{
		{Query{Expr: `sum by (reason) (rate(pulsar_proxy_handshake_failures_total{job=~"$job", instance=~"${instance}"}[$__rate_interval]))`, Legend: "{{reason}} {{instance}}"}, ""},
		{Query{Expr: `histogram_quantile(0.99, sum by (le, type) (rate(pulsar_proxy_lookup_seconds_bucket[5m])))`}, ""},
		{Query{Expr: `pulsar_proxy_ready == 0 unless on (job, instance) pulsar_proxy_ready`}, ""},
		{Query{Expr: `up == 0`}, ""},
		{Query{Expr: `rate(pulsar_proxy_handshake_failure_total[5m])`}, "metric pulsar_proxy_handshake_failure_total is not exported"},
		{Query{Expr: `pulsar_proxy_handshake_failures_total{cause="x"}`}, `has no label "cause"`},
		{Query{Expr: `pulsar_proxy_handshake_failures_total{reason="no_such_reason"}`}, `never has reason="no_such_reason"`},
		{Query{Expr: `sum by (mode) (pulsar_proxy_handshake_failures_total)`}, `groups by "mode"`},
		{Query{Expr: `pulsar_proxy_ready * on (mode) pulsar_proxy_ready`}, `matches on "mode"`},
		{Query{Expr: `sum(pulsar_proxy_ready)`, Legend: "{{mode}}"}, `legend names {{mode}}`},
		{Query{Expr: `sum(rate(x[5m]`}, "does not parse"},
		{Query{Expr: `pulsar_proxy_ready`, LabelValues: "version"}, "label_values"},
	} {
		got := Check([]Query{c.q}, e)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: unexpected problems %v", c.q.Expr, got)
		case c.want != "" && (len(got) == 0 || !strings.Contains(got[0].Message, c.want)):
			t.Errorf("%s: problems %v, want one saying %q", c.q.Expr, got, c.want)
		}
	}
}

// TestShippedDashboardAndRulesParse: every query of the shipped dashboard and rule file parses
// and selects only the proxy's own series, Go and process collectors' series and up.
func TestShippedDashboardAndRulesParse(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "helm", "pulsar-proxy", "files")
	dq, err := DashboardQueries(filepath.Join(dir, "pulsar-proxy-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	rq, err := RuleQueries(filepath.Join(dir, "pulsar-proxy-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dq) < 40 || len(rq) < 15 {
		t.Fatalf("%d dashboard queries and %d rules: fewer than shipped", len(dq), len(rq))
	}
	for _, q := range append(dq, rq...) {
		names := Selected(q.Expr)
		if len(names) == 0 {
			t.Errorf("%s: %q does not parse or selects nothing", q.Where, q.Expr)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "pulsar_proxy_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") && n != "up" {
				t.Errorf("%s selects %s, not a series of the proxy", q.Where, n)
			}
		}
	}
}

// freshScrape is what a fresh proxy exports: labelled counters at 0, a histogram without an
// observation.
const freshScrape = `# TYPE pulsar_proxy_handshake_failures_total counter
pulsar_proxy_handshake_failures_total{reason="authentication_failed"} 0
pulsar_proxy_handshake_failures_total{reason="bad_frame"} 0
# TYPE pulsar_proxy_lookup_seconds histogram
pulsar_proxy_lookup_seconds_bucket{type="LOOKUP",le="0.5"} 0
pulsar_proxy_lookup_seconds_bucket{type="LOOKUP",le="+Inf"} 0
pulsar_proxy_lookup_seconds_sum{type="LOOKUP"} 0
pulsar_proxy_lookup_seconds_count{type="LOOKUP"} 0
`

// NoData finds the queries a panel would show as "No data" on a fresh proxy: a filter that
// drops the zero series, a metric with no series yet; a quantile of no request (NaN) is data.
func TestNoData(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	var scrapes []Scrape
	for i := range 5 {
		scrapes = append(scrapes, Scrape{Time: start.Add(time.Duration(i) * time.Second), Text: freshScrape})
	}
	queries := []Query{
		{Where: "fine", Expr: `sum by (reason) (rate(pulsar_proxy_handshake_failures_total{job=~"$job"}[$__rate_interval]))`},
		{Where: "quantile", Expr: `histogram_quantile(0.99, sum by (le) (rate(pulsar_proxy_lookup_seconds_bucket[$__rate_interval])))`},
		{Where: "fallback", Expr: `sum by (reason) (rate(pulsar_proxy_handshake_failures_total[$__rate_interval])) > 0 or on () label_replace(sum(rate(pulsar_proxy_handshake_failures_total[$__rate_interval])), "reason", "none", "", "")`},
		{Where: "filtered", Expr: `sum by (reason) (rate(pulsar_proxy_handshake_failures_total[$__rate_interval])) > 0`},
		{Where: "missing", Expr: `sum(rate(pulsar_proxy_authentication_failures_total[$__rate_interval]))`},
		{Where: "variable", Expr: `pulsar_proxy_build_info`, LabelValues: "job"},
	}
	problems, err := NoData(queries, scrapes)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Where)
	}
	if strings.Join(got, ",") != "filtered,missing" {
		t.Errorf("queries without data: %v; want filtered, missing (%v)", got, problems)
	}
}
