package mux

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The proxy registers the series with multiplexing off too (no pool), so that the dashboard's
// panels hold on every replica: every series is exported, at zero, with the labels the
// dashboard groups by already present.
func TestMetricsWithoutPoolExportZeros(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			if v != 0 {
				t.Errorf("%s = %v without a pool, want 0", f.GetName(), v)
			}
			got[f.GetName()]++
		}
	}
	for name, series := range map[string]int{
		"pulsar_proxy_multiplex_broker_connections":              1,
		"pulsar_proxy_multiplex_clients":                         1,
		"pulsar_proxy_multiplex_clients_per_connection_max":      1,
		"pulsar_proxy_multiplex_mapped_ids":                      1,
		"pulsar_proxy_multiplex_slow_consumer_disconnects_total": 1,
		"pulsar_proxy_multiplex_closes_on_leave_total":           1,
		"pulsar_proxy_multiplex_dropped_frames_total":            1,
		"pulsar_proxy_multiplex_dials_total":                     2, // result ok, error
		"pulsar_proxy_multiplex_dial_seconds":                    1,
		"pulsar_proxy_multiplex_bytes_total":                     2, // both directions
	} {
		if got[name] != series {
			t.Errorf("%s: %d series, want %d", name, got[name], series)
		}
	}
	if len(got) != 10 {
		t.Errorf("%d metric families, want 10: %v", len(got), got)
	}
}
