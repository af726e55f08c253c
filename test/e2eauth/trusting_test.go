package e2eauth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// A broker with authenticateOriginalAuthData=true authenticates the credentials the proxy
// forwards with its own providers (Pulsar 4.0.8, ServerCnx.handleConnect): a client the proxy
// authenticated by its TLS certificate has nothing a broker could check (the proof of the
// key was the TLS handshake with the proxy), so such brokers refuse it whatever the proxy
// sends. Brokers behind a proxy that terminates mutual TLS must trust the original_principal
// of the proxy's role (authenticateOriginalAuthData=false, Pulsar's default). The trusting
// rig is such a cluster, started on demand by the tests that need it.

// envAttachTrusting names the state file of a trusting rig already up (development), whose
// brokers know the auth rig's key.
const envAttachTrusting = "PULSAR_PROXY_TRUSTING_RIG"

// trustingRigPorts is the trusting rig's port block, beside the auth rig's.
var trustingRigPorts = []string{
	"RIG_BROKER1_PORT=24650", "RIG_BROKER1_HTTP_PORT=24080",
	"RIG_BROKER2_PORT=24651", "RIG_BROKER2_HTTP_PORT=24081",
	"RIG_ZK_PORT=24181", "RIG_BOOKIE_PORT=24182",
	"RIG_CONSUL_HTTP_PORT=24500", "RIG_CONSUL_DNS_PORT=24600",
	"RIG_CONSUL_SERF_LAN_PORT=24301", "RIG_CONSUL_SERF_WAN_PORT=24302",
	"RIG_CONSUL_SERVER_PORT=24300", "RIG_CONSUL_GRPC_PORT=24502", "RIG_CONSUL_GRPC_TLS_PORT=24503",
}

var trusting struct {
	once sync.Once
	rig  *rig.Rig
	err  error
}

// trustingRig returns the trusting rig, starting it (with the auth rig's tenants and grants)
// on first use.
func trustingRig(t *testing.T) *rig.Rig {
	t.Helper()
	trusting.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		trusting.rig, trusting.err = startTrustingRig(ctx)
		if trusting.err == nil {
			trusting.err = setupTenants(ctx, trusting.rig)
		}
	})
	if trusting.err != nil {
		t.Fatalf("trusting rig: %v", trusting.err)
	}
	return trusting.rig
}

func startTrustingRig(ctx context.Context) (*rig.Rig, error) {
	if p := os.Getenv(envAttachTrusting); p != "" {
		return rig.AttachWith(ctx, p, rig.Options{AdminToken: mustToken(superUser, 0)})
	}
	dir := filepath.Join(filepath.Dir(rigDir()), filepath.Base(rigDir())+"-trusting")
	return startAuthRig(ctx, "trusting rig", dir, trustingRigPorts, false)
}

// stopTrustingRig stops the trusting rig if this process started it.
func stopTrustingRig() {
	if r := trusting.rig; r != nil && r.Owned() {
		if err := r.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "rig: stopping the trusting rig failed: %v\n", err)
		}
	}
}
