package authz

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// metricValue is what reg reports for the counter or gauge name with the label pairs
// labelsAndValues (name, value, …): tests read the metrics as a scrape does, by name and
// labels. A series not there yet is 0.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labelsAndValues ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labelsAndValues); i += 2 {
		want[labelsAndValues[i]] = labelsAndValues[i+1]
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
