package httpapi

import (
	"runtime"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
)

func TestStatusMetricsFollowReadinessAndDrain(t *testing.T) {
	reg := promtest.New()
	ready, draining := false, false
	RegisterStatus(reg, "1.2.3", func() (bool, string) { return ready, "no broker" }, func() bool { return draining })

	check := func(wantReady, wantDraining float64) {
		t.Helper()
		if got := reg.Value(t, "pulsar_proxy_ready"); got != wantReady {
			t.Errorf("pulsar_proxy_ready = %v, want %v", got, wantReady)
		}
		if got := reg.Value(t, "pulsar_proxy_draining"); got != wantDraining {
			t.Errorf("pulsar_proxy_draining = %v, want %v", got, wantDraining)
		}
	}
	check(0, 0)
	ready = true
	check(1, 0)
	ready, draining = false, true
	check(0, 1)
	if got := reg.Value(t, "pulsar_proxy_build_info", "version", "1.2.3", "goversion", runtime.Version()); got != 1 {
		t.Errorf("pulsar_proxy_build_info = %v, want 1", got)
	}
}
