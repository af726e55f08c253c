// Package promcheck holds a Grafana dashboard and Prometheus rule files to what a running
// pulsar-proxy exports: every PromQL query is parsed with Prometheus's own parser, and every
// metric it selects, every label it matches, groups or joins on, and every label a legend
// names, must be in a scrape of the proxy's /metrics (or be a label Prometheus itself adds to
// scraped series, such as job and instance).
package promcheck

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

// TargetLabels are the labels Prometheus (or the Prometheus operator's ServiceMonitor) adds to
// every scraped series; a query may use them although the binary does not export them.
var TargetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// Exported is what one scrape of /metrics holds: for every sample name (histograms and
// summaries by their _bucket, _sum and _count names too), its label names and values.
type Exported map[string]map[string]map[string]bool // metric → label → values

// ParseScrape reads the Prometheus text exposition.
func ParseScrape(r io.Reader) (Exported, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	e := Exported{}
	add := func(name string, ls map[string]string) {
		m := e[name]
		if m == nil {
			m = map[string]map[string]bool{}
			e[name] = m
		}
		for k, v := range ls {
			if m[k] == nil {
				m[k] = map[string]bool{}
			}
			m[k][v] = true
		}
	}
	for name, f := range families {
		for _, metric := range f.GetMetric() {
			ls := map[string]string{}
			for _, l := range metric.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			switch {
			case metric.GetHistogram() != nil:
				add(name+"_sum", ls)
				add(name+"_count", ls)
				bucket := maps(ls)
				for _, b := range metric.GetHistogram().GetBucket() {
					bucket["le"] = fmt.Sprint(b.GetUpperBound())
					add(name+"_bucket", bucket)
				}
				bucket["le"] = "+Inf"
				add(name+"_bucket", bucket)
			case metric.GetSummary() != nil:
				add(name+"_sum", ls)
				add(name+"_count", ls)
				q := maps(ls)
				for _, s := range metric.GetSummary().GetQuantile() {
					q["quantile"] = fmt.Sprint(s.GetQuantile())
					add(name, q)
				}
			default:
				add(name, ls)
			}
		}
	}
	return e, nil
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Merge adds the series of other (a later scrape) to e.
func (e Exported) Merge(other Exported) {
	for name, ls := range other {
		if e[name] == nil {
			e[name] = map[string]map[string]bool{}
		}
		for l, vs := range ls {
			if e[name][l] == nil {
				e[name][l] = map[string]bool{}
			}
			for v := range vs {
				e[name][l][v] = true
			}
		}
	}
}

// Query is one PromQL expression and where it comes from.
type Query struct {
	Where  string // e.g. `panel "Lookup latency" target A` or `rule PulsarProxyDown`
	Expr   string
	Legend string // a Grafana legend format ({{label}} …), "" for rules
	// LabelValues is the label of a Grafana label_values(selector, label) variable query.
	LabelValues string
}

// Problem is one way a query disagrees with the scrape.
type Problem struct {
	Where, Message string
}

func (p Problem) String() string { return p.Where + ": " + p.Message }

// grafanaVars are the dashboard's built-in interval variables, as a duration PromQL accepts.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m", "$__range", "1h", "${__range}", "1h")

// templateVar is a dashboard variable ($job, ${instance}); it only ever stands in a string.
var templateVar = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

// Expand replaces Grafana's variables so that Prometheus's parser reads the query: interval
// variables by a duration, the dashboard's own variables by ".*" (they stand in regex matchers).
func Expand(expr string) string {
	return templateVar.ReplaceAllString(grafanaVars.Replace(expr), ".*")
}

// Check parses every query and holds it to the scrape.
func Check(queries []Query, e Exported) []Problem {
	var out []Problem
	for _, q := range queries {
		for _, msg := range checkQuery(q, e) {
			out = append(out, Problem{q.Where, msg})
		}
	}
	return out
}

// checkQuery lists how q disagrees with the scrape: its selectors first, then (once they hold)
// the labels it uses.
func checkQuery(q Query, e Exported) []string {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(Expand(q.Expr))
	if err != nil {
		return []string{fmt.Sprintf("does not parse: %v (query %q)", err, q.Expr)}
	}
	problems, selected := checkSelectors(expr, e)
	if len(problems) > 0 {
		return problems
	}
	return checkLabelUses(q, expr, selected, e)
}

// checkSelectors holds every vector selector of expr to the scrape; selected are the metrics
// the selectors name that the scrape has (and up).
func checkSelectors(expr parser.Expr, e Exported) (problems []string, selected map[string]bool) {
	selected = map[string]bool{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			problems = append(problems, checkSelector(vs, e, selected)...)
		}
		return nil
	})
	return problems, selected
}

// checkSelector: vs names a metric the scrape exports, with the labels it matches on and the
// values it matches exactly; it adds the metric to selected when the scrape has it.
func checkSelector(vs *parser.VectorSelector, e Exported, selected map[string]bool) []string {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		return []string{fmt.Sprintf("selector %s names no metric", vs)}
	}
	if name == "up" {
		selected[name] = true
		return nil // Prometheus's own series of a target, with its target labels only
	}
	ls, ok := e[name]
	if !ok {
		return []string{fmt.Sprintf("metric %s is not exported by the proxy (not in its /metrics)", name)}
	}
	selected[name] = true
	var problems []string
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName || slices.Contains(TargetLabels, m.Name) {
			continue
		}
		values, ok := ls[m.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s has no label %q (its labels: %s)", name, m.Name, keys(ls)))
			continue
		}
		if m.Type == labels.MatchEqual && m.Value != "" && !values[m.Value] {
			problems = append(problems, fmt.Sprintf("metric %s never has %s=%q in the scrape (values seen: %s)", name, m.Name, m.Value, keys(values)))
		}
	}
	return problems
}

// checkLabelUses: the labels q groups by, matches on, names in its legend or asks label_values
// of must exist on a metric it selects.
func checkLabelUses(q Query, expr parser.Expr, selected map[string]bool, e Exported) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	known := func(l string) bool { return knownLabel(l, selected, e) }
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			for _, l := range n.Grouping {
				if !known(l) {
					bad("groups by %q, which no metric it selects has", l)
				}
			}
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				for _, l := range append(slices.Clone(vm.MatchingLabels), vm.Include...) {
					if !known(l) {
						bad("matches on %q, which no metric it selects has", l)
					}
				}
			}
		}
		return nil
	})
	for _, l := range legendLabels(q.Legend) {
		if !known(l) {
			bad("legend names {{%s}}, which no metric it selects has", l)
		}
	}
	if q.LabelValues != "" && !known(q.LabelValues) {
		bad("label_values of %q, which the metric does not have", q.LabelValues)
	}
	return problems
}

// knownLabel: l is a target label, or a label of one of the selected metrics.
func knownLabel(l string, selected map[string]bool, e Exported) bool {
	if slices.Contains(TargetLabels, l) {
		return true
	}
	for name := range selected {
		if _, ok := e[name][l]; ok {
			return true
		}
	}
	return false
}

var legendLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

func legendLabels(f string) []string {
	var out []string
	for _, m := range legendLabel.FindAllStringSubmatch(f, -1) {
		out = append(out, m[1])
	}
	return out
}

func keys[V any](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// DashboardQueries reads every query of a Grafana dashboard: each panel's targets (rows'
// nested panels too) and each query variable.
func DashboardQueries(path string) ([]Query, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Query
	var visit func(ps []panel)
	visit = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr, Legend: t.LegendFormat})
			}
			visit(p.Panels)
		}
	}
	visit(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			json.Unmarshal(v.Query, &q.Query) // the older form: a plain string
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			return nil, fmt.Errorf("%s: variable %q: only label_values(selector, label) queries are checked, got %q", path, v.Name, q.Query)
		}
		out = append(out, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: m[1], LabelValues: m[2]})
	}
	return out, nil
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$`)

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// RuleQueries reads every expression of a Prometheus rule file (alerting and recording rules).
func RuleQueries(path string) ([]Query, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, Query{Where: "rule " + r.Alert + r.Record, Expr: r.Expr})
		}
	}
	return out, nil
}

// Selected names the metrics an expression selects ("" names for a query that does not parse).
func Selected(expr string) []string {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(Expand(expr))
	if err != nil {
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name != "" {
				out = append(out, name)
			}
		}
		return nil
	})
	return out
}
