package promcheck

import (
	"context"
	"fmt"
	"os"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
)

// The recording is of one replica; these are the target labels Prometheus would give it.
const (
	job      = "pulsar-proxy"
	instance = "pulsar-proxy-0"
)

// TSDB is a recording loaded into Prometheus's own storage, for its PromQL engine.
type TSDB struct {
	*tsdb.DB
	dir string
}

// Load appends every sample of every scrape at its time, with the target labels job and
// instance, into a TSDB in a temporary folder that Close removes.
func Load(scrapes []Scrape) (*TSDB, error) {
	dir, err := os.MkdirTemp("", "promcheck-")
	if err != nil {
		return nil, err
	}
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	t := &TSDB{DB: db, dir: dir}
	if err := load(db, scrapes); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Close closes the storage and removes its folder.
func (t *TSDB) Close() error {
	err := t.DB.Close()
	os.RemoveAll(t.dir)
	return err
}

// load appends every sample of every scrape at its time, with the target labels.
func load(db *tsdb.DB, scrapes []Scrape) error {
	app := db.Appender(context.Background())
	for _, s := range scrapes {
		if err := appendScrape(app, s); err != nil {
			return err
		}
	}
	return app.Commit()
}

// appendScrape appends one scrape's samples at its time: up, then every metric.
func appendScrape(app storage.Appender, s Scrape) error {
	t := s.Time.UnixMilli()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(s.Text))
	if err != nil {
		return err
	}
	if err := appendSample(app, "up", nil, t, 1); err != nil {
		return err
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			if err := appendMetric(app, name, m, t); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// appendSample appends one sample of metric name with labels ls and the target labels.
func appendSample(app storage.Appender, name string, ls map[string]string, t int64, v float64) error {
	b := labels.NewBuilder(labels.EmptyLabels())
	b.Set(labels.MetricName, name)
	b.Set("job", job)
	b.Set("instance", instance)
	for k, val := range ls {
		b.Set(k, val)
	}
	_, err := app.Append(0, b.Labels(), t, v)
	return err
}

// appendMetric appends metric m of family name as Prometheus stores it: a histogram or a
// summary as its series (_sum, _count, buckets or quantiles).
func appendMetric(app storage.Appender, name string, m *dto.Metric, t int64) error {
	ls := map[string]string{}
	for _, l := range m.GetLabel() {
		ls[l.GetName()] = l.GetValue()
	}
	switch {
	case m.GetCounter() != nil:
		return appendSample(app, name, ls, t, m.GetCounter().GetValue())
	case m.GetGauge() != nil:
		return appendSample(app, name, ls, t, m.GetGauge().GetValue())
	case m.GetUntyped() != nil:
		return appendSample(app, name, ls, t, m.GetUntyped().GetValue())
	case m.GetHistogram() != nil:
		return appendHistogram(app, name, ls, t, m.GetHistogram())
	case m.GetSummary() != nil:
		return appendSummary(app, name, ls, t, m.GetSummary())
	}
	return nil
}

func appendHistogram(app storage.Appender, name string, ls map[string]string, t int64, h *dto.Histogram) error {
	if err := appendSample(app, name+"_sum", ls, t, h.GetSampleSum()); err != nil {
		return err
	}
	if err := appendSample(app, name+"_count", ls, t, float64(h.GetSampleCount())); err != nil {
		return err
	}
	for _, b := range h.GetBucket() {
		if err := appendSample(app, name+"_bucket", with(ls, "le", fmt.Sprint(b.GetUpperBound())), t, float64(b.GetCumulativeCount())); err != nil {
			return err
		}
	}
	return appendSample(app, name+"_bucket", with(ls, "le", "+Inf"), t, float64(h.GetSampleCount()))
}

func appendSummary(app storage.Appender, name string, ls map[string]string, t int64, sm *dto.Summary) error {
	if err := appendSample(app, name+"_sum", ls, t, sm.GetSampleSum()); err != nil {
		return err
	}
	if err := appendSample(app, name+"_count", ls, t, float64(sm.GetSampleCount())); err != nil {
		return err
	}
	for _, q := range sm.GetQuantile() {
		if err := appendSample(app, name, with(ls, "quantile", fmt.Sprint(q.GetQuantile())), t, q.GetValue()); err != nil {
			return err
		}
	}
	return nil
}

func with(ls map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(ls)+1)
	for a, b := range ls {
		out[a] = b
	}
	out[k] = v
	return out
}
