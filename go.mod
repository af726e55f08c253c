module github.com/pulsar-proxy/pulsar-proxy

go 1.26.0

require (
	github.com/apache/pulsar-client-go v0.19.0 // indirect
	github.com/caarlos0/env/v11 v11.4.2 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
