package promtest

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type recorder struct{ failed string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	if r.failed == "" {
		r.failed = fmt.Sprintf(format, args...)
	}
}

func TestValueFailsForWhatIsNotRegistered(t *testing.T) {
	reg := New()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"b", "a"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "y", ConstLabels: prometheus.Labels{"k": "v"}})
	reg.MustRegister(c, g)
	c.WithLabelValues("2", "1").Add(3)
	g.Set(7)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
		fails  bool
	}{
		{"x_total", []string{"a", "1", "b", "2"}, 3, false},
		{"x_total", []string{"a", "9", "b", "2"}, 0, false}, // a series not touched yet
		{"x_total", []string{"a", "1"}, 0, true},            // a label missing
		{"x_total", []string{"a", "1", "b", "2", "c", "3"}, 0, true},
		{"x_renamed_total", []string{"a", "1", "b", "2"}, 0, true},
		{"y", []string{"k", "v"}, 7, false},
	} {
		r := &recorder{}
		got := reg.Value(r, tc.name, tc.labels...)
		if (r.failed != "") != tc.fails || (!tc.fails && got != tc.want) {
			t.Errorf("%s%v = %v (failed: %q), want %v (fails: %v)", tc.name, tc.labels, got, r.failed, tc.want, tc.fails)
		}
	}
}
