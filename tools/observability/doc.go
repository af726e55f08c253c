// Package observability holds pulsar-proxy's Grafana dashboard and alert rules (shipped in
// helm/pulsar-proxy/files) to the proxy: promtool unit tests of the alerts (alerts_test.yaml),
// and promcheck, which checks every query against a scrape of a running proxy. It is a module
// of its own so that Prometheus's libraries stay out of the product's go.mod.
package observability
