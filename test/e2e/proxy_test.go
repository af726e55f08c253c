package e2e

import (
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

// proxyBinary is built once by a beforeAll step for the whole package.
var proxyBinary string

// proxy wraps a running pulsar-proxy for tests.
type proxy struct {
	*proxyproc.Proc
	t *testing.T
}

// startProxy runs the real proxy binary with the given brokers and extra YAML, and stops it
// (SIGTERM) when the test ends, printing its log if the test failed.
func startProxy(t *testing.T, brokers []string, extraYAML string) *proxy {
	t.Helper()
	return &proxy{Proc: proxyproc.StartForTest(t, proxyBinary, t.TempDir(), brokers, extraYAML), t: t}
}

func (p *proxy) get(path string) (int, string) { return p.Get(path) }

// metric reads a series that must be in the proxy's /metrics (a gauge, an unlabelled counter,
// or a labelled counter already seen incremented): a missing metric or series fails the test.
func (p *proxy) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	s, err := metrics.Fetch(p.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Value(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// count reads a labelled counter whose series appears when first incremented: 0 until then.
// The counter and its label names must exist (metrics.Scrape.Count), so a renamed metric or
// label fails the test instead of reading 0.
func (p *proxy) count(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	s, err := metrics.Fetch(p.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Count(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
