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
	return &proxy{Proc: proxyproc.StartForTest(t, proxyBinary, t.TempDir(), brokers, extraYAML), t: t}
}

func (p *proxy) get(path string) (int, string) { return p.Get(path) }
