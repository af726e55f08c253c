package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_proxy_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	ready, reason := false, "no broker reachable"
	srv := httptest.NewServer(Handler(reg, func() (bool, string) { return ready, reason }))
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, reason) {
		t.Errorf("/readyz not ready = %d %q, want 503 with the reason", code, body)
	}
	ready = true
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz ready = %d, want 200", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "pulsar_proxy_test_total 3") {
		t.Errorf("/metrics = %d, missing the registered counter:\n%s", code, body)
	}
}

func TestPprofServesProfilesOnItsOwnMux(t *testing.T) {
	rec := httptest.NewRecorder()
	Pprof().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Fatalf("/debug/pprof/ = %d %q", rec.Code, rec.Body.String())
	}
	// The operational mux does not expose them.
	rec = httptest.NewRecorder()
	Handler(prometheus.NewRegistry(), func() (bool, string) { return true, "" }).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	if rec.Code == 200 {
		t.Fatal("the health/metrics mux serves /debug/pprof/")
	}
}
