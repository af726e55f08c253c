package httpapi

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterStatus exports what /readyz says and which build is running, so that dashboards and
// alerts see them without probing each replica: pulsar_proxy_ready (1 while /readyz answers
// 200), pulsar_proxy_draining (1 from SIGTERM until the drain ends) and pulsar_proxy_build_info
// (always 1; the version and the Go version as labels). The gauges are read at scrape time.
func RegisterStatus(reg prometheus.Registerer, version string, ready ReadyFunc, draining func() bool) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulsar_proxy_ready",
			Help: "1 while the proxy is ready for traffic (GET /readyz answers 200), else 0.",
		}, func() float64 {
			ok, _ := ready()
			return boolValue(ok)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulsar_proxy_draining",
			Help: "1 while the proxy drains its sessions after SIGTERM/SIGINT, else 0.",
		}, func() float64 { return boolValue(draining()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "pulsar_proxy_build_info",
			Help:        "Always 1; labels name the running build: the proxy's version and the Go version it was built with.",
			ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
	)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
