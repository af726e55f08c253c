package e2e

import (
	"testing"

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
	p, err := proxyproc.Start(proxyBinary, t.TempDir(), brokers, extraYAML)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Stop() {
			t.Errorf("pulsar-proxy did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("proxy log tail:\n%s", p.LogTail(60))
		}
	})
	return &proxy{Proc: p, t: t}
}

func (p *proxy) get(path string) (int, string) { return p.Get(path) }

func (p *proxy) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, err := p.Metric(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
