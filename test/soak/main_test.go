//go:build soak

package soak

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// envDuration is how long the soak runs (e.g. 30m; `make soak` sets it). The soak's files
// build only with the soak tag (`make soak`), so `go test ./...` in test/ (make test) runs
// just the package's unit tests of its report.
const envDuration = "SOAK_DURATION"

// rigPorts is this package's port block (21xxx), apart from every other package's, so a soak
// can run beside them; below the ephemeral range (32768 and up).
var rigPorts = []string{
	"RIG_BROKER1_PORT=21650", "RIG_BROKER1_HTTP_PORT=21080",
	"RIG_BROKER2_PORT=21651", "RIG_BROKER2_HTTP_PORT=21081",
	"RIG_ZK_PORT=21181", "RIG_BOOKIE_PORT=21182",
	"RIG_CONSUL_HTTP_PORT=21500", "RIG_CONSUL_DNS_PORT=21600",
	"RIG_CONSUL_SERF_LAN_PORT=21301", "RIG_CONSUL_SERF_WAN_PORT=21302",
	"RIG_CONSUL_SERVER_PORT=21300", "RIG_CONSUL_GRPC_PORT=21502", "RIG_CONSUL_GRPC_TLS_PORT=21503",
}

var (
	theRig      *rig.Rig
	proxyBinary string
)

func TestMain(m *testing.M) { os.Exit(proxyproc.LogsMain(runMain(m))) }

func runMain(m *testing.M) int {
	flag.Parse()
	if os.Getenv(envDuration) == "" {
		fmt.Fprintln(os.Stderr, "FAIL: set SOAK_DURATION (make soak sets 30m)")
		return 1
	}
	if run, code := rig.Gate("soak"); !run {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	began := time.Now()
	r, err := rig.StartWith(ctx, rig.Options{Dir: rigDir(), Env: rigPorts})
	if err != nil {
		return rig.StartFailure("soak", err)
	}
	fmt.Printf("soak rig: startup took %s\n", time.Since(began).Round(100*time.Millisecond))
	theRig = r
	defer func() {
		if err := r.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "rig: stopping the soak rig failed: %v\n", err)
		}
	}()
	bin, remove, err := proxyproc.BuildTemp("pulsar-proxy-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer remove()
	proxyBinary = bin
	return m.Run()
}

// rigDir is where the soak rig keeps its state: RIG_SOAK_DIR, or rig-soak in the rigs' state root.
func rigDir() string {
	return rig.PrivateDir("RIG_SOAK_DIR", "rig-soak")
}
