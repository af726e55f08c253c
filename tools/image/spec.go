package main

// The facts of the image, in one place. The Dockerfile at the repository root states the same
// facts for operators who build with Docker; dockerfile_test.go keeps the two in step.
const (
	binaryPath = "/pulsar-proxy"
	configPath = "/etc/pulsar-proxy/config.yaml"
	// configSource is the default config's source, relative to the repository root.
	configSource = "deploy/container/config.yaml"
	// user is numeric so the image needs no /etc/passwd; 65532 is the usual "nonroot".
	user = "65532:65532"
)

// entrypoint runs the proxy; cmd is its default arguments, so `docker run IMAGE --version`
// and a Kubernetes `args:` replace only the arguments.
var (
	entrypoint = []string{binaryPath}
	cmd        = []string{"--config", configPath}
	// pulsar, pulsar+ssl, http, https (admin.listenHTTPS): the chart's container ports
	exposedPorts = []string{"6650/tcp", "6651/tcp", "8080/tcp", "8443/tcp"}
)

// buildFlags are the `go build` flags of the proxy binary, besides the version stamp:
// static (CGO_ENABLED=0 in the environment), no local paths, no symbol table.
var buildFlags = []string{"-trimpath"}

// ldflags stamps the version into main.version (see cmd/pulsar-proxy).
func ldflags(version string) string { return "-s -w -X main.version=" + version }
