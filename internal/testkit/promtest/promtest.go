// Package promtest reads a Prometheus registry in tests the way a scrape does, by metric
// name and labels, and fails a test that asks for a metric or a label the code does not
// register: after a rename, a check that a counter is zero must fail, not pass. It is for
// tests only and is never linked into the proxy.
package promtest

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// T is the part of testing.TB the package uses.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Registry is a prometheus.Registry that remembers the name and label names of every
// metric registered with it.
type Registry struct {
	*prometheus.Registry
	mu     sync.Mutex
	labels map[string][]string // by metric name: its label names, sorted
}

// New returns an empty Registry.
func New() *Registry {
	return &Registry{Registry: prometheus.NewRegistry(), labels: map[string][]string{}}
}

// Register registers c and remembers its metrics.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	descs := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(descs); close(descs) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range descs {
		name, labels := parseDesc(d.String())
		r.labels[name] = labels
	}
	return nil
}

// MustRegister registers every collector, panicking on a failure as prometheus does.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var (
	descName   = regexp.MustCompile(`fqName: "([^"]*)"`)
	descLabels = regexp.MustCompile(`(?:variableLabels|constLabels): \{([^}]*)\}`)
)

// parseDesc reads a Desc's name and label names from its String form, the only way the
// client library shows them.
func parseDesc(s string) (string, []string) {
	name := ""
	if m := descName.FindStringSubmatch(s); m != nil {
		name = m[1]
	}
	var labels []string
	for _, m := range descLabels.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				l, _, _ = strings.Cut(l, "=")
				labels = append(labels, strings.Trim(l, `"`))
			}
		}
	}
	slices.Sort(labels)
	return name, labels
}

// Value is the value of the counter or gauge name with exactly the label pairs
// labelsAndValues (name, value, …). A series of a registered metric that has not been
// touched yet is 0; a name, or a set of label names, the code never registered fails t.
func (r *Registry) Value(t T, name string, labelsAndValues ...string) float64 {
	t.Helper()
	want := map[string]string{}
	var names []string
	for i := 0; i+1 < len(labelsAndValues); i += 2 {
		want[labelsAndValues[i]] = labelsAndValues[i+1]
		names = append(names, labelsAndValues[i])
	}
	slices.Sort(names)
	r.mu.Lock()
	registered, ok := r.labels[name]
	r.mu.Unlock()
	if !ok {
		t.Fatalf("metric %s is not registered", name)
	}
	if !slices.Equal(registered, names) {
		t.Fatalf("metric %s has labels %v, not %v", name, registered, names)
	}
	families, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
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

// Wait waits (at most five seconds) until Value reaches want.
func (r *Registry) Wait(t T, name string, want float64, labelsAndValues ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := r.Value(t, name, labelsAndValues...)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want %v", name, labelsAndValues, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
