module github.com/pulsar-proxy/pulsar-proxy/bench

go 1.26.7

require (
	github.com/coder/websocket v1.8.15
	github.com/golang-jwt/jwt/v5 v5.3.1
	github.com/pulsar-proxy/pulsar-proxy v0.0.0
	github.com/pulsar-proxy/pulsar-proxy/test v0.0.0
	golang.org/x/image v0.48.0
	golang.org/x/sync v0.25.0
	golang.org/x/sys v0.50.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
)

// The product and its test rig, from this checkout.
replace (
	github.com/pulsar-proxy/pulsar-proxy => ../
	github.com/pulsar-proxy/pulsar-proxy/test => ../test
)
