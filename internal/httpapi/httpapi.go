// Package httpapi serves the proxy's operational HTTP endpoints: liveness, readiness and
// Prometheus metrics.
package httpapi

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyFunc reports whether the proxy should receive traffic, and why not.
type ReadyFunc func() (ready bool, reason string)

// Handler returns the mux for /healthz, /readyz and /metrics.
func Handler(gatherer prometheus.Gatherer, ready ReadyFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, reason := ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: " + reason + "\n"))
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}

// Pprof returns a mux serving Go's profiles under /debug/pprof/, for a listener of its own
// (listen.pprof), never the metrics one. (Importing net/http/pprof also registers these on
// http.DefaultServeMux, which the proxy never serves.)
func Pprof() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
