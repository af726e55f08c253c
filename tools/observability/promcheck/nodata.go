package promcheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql"
)

// NewEngine is Prometheus's PromQL engine as these checks use it: a lookback of a few
// seconds, since a recording is scraped every second or so.
func NewEngine() *promql.Engine {
	return promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Second})
}

// ExpandShort gives a dashboard query's variables values for a recording of a minute or two:
// a short rate window, and every job and instance.
func ExpandShort(expr string) string {
	r := strings.NewReplacer("$__rate_interval", "10s", "${__rate_interval}", "10s")
	return Expand(r.Replace(expr))
}

// Range evaluates a dashboard query (ExpandShort) over t from start to end at step.
func (t *TSDB) Range(engine *promql.Engine, expr string, start, end time.Time, step time.Duration) (promql.Matrix, error) {
	q, err := engine.NewRangeQuery(context.Background(), t.DB, nil, ExpandShort(expr), start, end, step)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		return nil, res.Err
	}
	m, err := res.Matrix()
	if err != nil {
		return nil, err
	}
	// A copy: the engine reuses the points' memory once the query is closed.
	out := make(promql.Matrix, len(m))
	for i, s := range m {
		out[i] = promql.Series{Metric: s.Metric, Floats: append([]promql.FPoint(nil), s.Floats...)}
	}
	return out, nil
}

// NoData lists the queries that return no series at all over a recording (what Grafana
// shows as "No data"): on a fresh proxy's recording, every dashboard query must return one,
// if only at 0 (or NaN: a latency quantile of no request).
func NoData(queries []Query, scrapes []Scrape) ([]Problem, error) {
	db, err := Load(scrapes)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	engine := NewEngine()
	start, end := scrapes[0].Time, scrapes[len(scrapes)-1].Time
	step := max(end.Sub(start)/20, time.Second)
	var out []Problem
	for _, q := range queries {
		if q.LabelValues != "" {
			continue // a variable's label_values: held to the scrape by Check
		}
		m, err := db.Range(engine, q.Expr, start, end, step)
		switch {
		case err != nil:
			out = append(out, Problem{q.Where, fmt.Sprintf("does not evaluate: %v", err)})
		case len(m) == 0:
			out = append(out, Problem{q.Where, fmt.Sprintf("returns no series on a fresh proxy (the panel would say No data): %s", q.Expr)})
		}
	}
	return out, nil
}
