// Package firstday plays an operator's first day from docs/install.md alone, against real
// brokers: the release's binary for this machine (make release), its checksum checked with
// the page's command, the page's ten-line configuration pointed at the rig's brokers,
// check-config --connect without a warning, the proxy started, a topic produced to and
// consumed from through it with pulsar-client-go, the proxy stopped. It has its own rig, on
// a port block of its own (25xxx), so that it runs beside test/e2e's.
package firstday

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// envAttach names the state file of a first-day rig already up (development: saves restarts).
const envAttach = "PULSAR_PROXY_FIRSTDAY_RIG"

// rigPorts is this package's port block, below the ephemeral range (32768 and up).
var rigPorts = []string{
	"RIG_BROKER1_PORT=25650", "RIG_BROKER1_HTTP_PORT=25080",
	"RIG_BROKER2_PORT=25651", "RIG_BROKER2_HTTP_PORT=25081",
	"RIG_ZK_PORT=25181", "RIG_BOOKIE_PORT=25182",
	"RIG_CONSUL_HTTP_PORT=25500", "RIG_CONSUL_DNS_PORT=25600",
	"RIG_CONSUL_SERF_LAN_PORT=25301", "RIG_CONSUL_SERF_WAN_PORT=25302",
	"RIG_CONSUL_SERVER_PORT=25300", "RIG_CONSUL_GRPC_PORT=25502", "RIG_CONSUL_GRPC_TLS_PORT=25503",
}

var theRig *rig.Rig

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	if run, code := rig.Gate("firstday"); !run {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	r, err := startRig(ctx)
	if err != nil {
		return rig.StartFailure("firstday", err)
	}
	theRig = r
	if r.Owned() {
		defer func() {
			if err := r.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "rig: stopping the first-day rig failed: %v\n", err)
			}
		}()
	}
	return m.Run()
}

func startRig(ctx context.Context) (*rig.Rig, error) {
	if p := os.Getenv(envAttach); p != "" {
		return rig.Attach(ctx, p)
	}
	dir := rig.PrivateDir("RIG_FIRSTDAY_DIR", "rig-firstday")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	began := time.Now()
	r, err := rig.StartWith(ctx, rig.Options{Dir: dir, Env: rigPorts})
	if err == nil {
		fmt.Printf("first-day rig: startup took %s\n", time.Since(began).Round(100*time.Millisecond))
	}
	return r, err
}
