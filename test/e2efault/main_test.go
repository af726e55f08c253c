// Package e2efault holds the end-to-end tests of faults, storms and stuck peers: a broker
// killed (SIGKILL) or frozen (SIGSTOP) under load, a broker port that never answers, garbage
// on the wire, the proxy itself killed and restarted, a reconnect storm of 10,000 clients, and
// clients that stop reading or stop half-way through a frame. It has its own rig, on a port
// block of its own, whose brokers fail over as a production cluster does (see faultConf):
// the tests kill and freeze its brokers, which the other packages' tests must not see.
package e2efault

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// envAttach names the state file of a fault rig already up (development: saves restarts).
const envAttach = "PULSAR_PROXY_FAULT_RIG"

// rigPorts is this package's port block, below the ephemeral range (32768 and up).
var rigPorts = []string{
	"RIG_BROKER1_PORT=20650", "RIG_BROKER1_HTTP_PORT=20080",
	"RIG_BROKER2_PORT=20651", "RIG_BROKER2_HTTP_PORT=20081",
	"RIG_ZK_PORT=20181", "RIG_BOOKIE_PORT=20182",
	"RIG_CONSUL_HTTP_PORT=20500", "RIG_CONSUL_DNS_PORT=20600",
	"RIG_CONSUL_SERF_LAN_PORT=20301", "RIG_CONSUL_SERF_WAN_PORT=20302",
	"RIG_CONSUL_SERVER_PORT=20300", "RIG_CONSUL_GRPC_PORT=20502", "RIG_CONSUL_GRPC_TLS_PORT=20503",
}

// faultConf is what the brokers of this rig add to the rig's common config so that a crashed
// broker's bundles move as in a production cluster.
//
// The ZooKeeper session is what holds a broker's bundles: its ownership nodes are ephemeral and
// go only when the session expires. Pulsar's default, 30 s, keeps a crashed broker's topics
// unowned for half a minute, and the clients' reconnect backoff (doubling to 60 s in the Go
// and Java clients) then often waits past the end of a short run. 6 s is the least the rig's
// ZooKeeper grants (2 ticks of 3 s; a smaller request is raised to it), and production
// deployments on a good network run 6 to 10 s.
//
// keepAliveIntervalSeconds=10 (default 30): a broker pings an idle client after this long and
// drops it when the next ping comes with no answer; shorter, so the test of a client that
// stops mid-frame on an unframed session (which the broker ends) stays short.
const faultConf = `metadataStoreSessionTimeoutMillis=6000
keepAliveIntervalSeconds=10
`

var (
	theRig      *rig.Rig
	proxyBinary string
)

func TestMain(m *testing.M) {
	if runChild() { // a child process of a test (see child_test.go); never returns
		return
	}
	os.Exit(proxyproc.LogsMain(runMain(m)))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if run, code := rig.Gate("e2efault"); !run {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	r, err := startRig(ctx)
	if err != nil {
		return rig.StartFailure("e2efault", err)
	}
	theRig = r
	if r.Owned() {
		defer func() {
			if err := r.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "rig: stopping the fault rig failed: %v\n", err)
			}
		}()
	}
	bin, remove, err := proxyproc.BuildTemp("pulsar-proxy-e2efault-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer remove()
	proxyBinary = bin
	return m.Run()
}

// rigDir is where the fault rig keeps its state.
func rigDir() string {
	return rig.PrivateDir("RIG_FAULT_DIR", "rig-fault")
}

func startRig(ctx context.Context) (*rig.Rig, error) {
	if p := os.Getenv(envAttach); p != "" {
		return rig.Attach(ctx, p)
	}
	dir := rigDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "broker-fault.conf")
	if err := os.WriteFile(conf, []byte(faultConf), 0o600); err != nil {
		return nil, err
	}
	began := time.Now()
	r, err := rig.StartWith(ctx, rig.Options{Dir: dir, Env: append(append([]string(nil), rigPorts...), "RIG_BROKER_EXTRA_CONF="+conf)})
	if err == nil {
		fmt.Printf("fault rig: startup took %s\n", time.Since(began).Round(100*time.Millisecond))
	}
	return r, err
}
