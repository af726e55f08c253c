// Package e2e holds the end-to-end tests: real Pulsar brokers and Consul from the test rig
// (test/rig), started once for the package by TestMain.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// theRig is the rig every test of the package uses. Tests that stop a broker must start it
// again before they return (t.Cleanup), since the other tests share it.
var theRig *rig.Rig

// rigStartTimeout bounds rig.Start, including a cold cache: downloading the Pulsar jars and
// building Consul can take a quarter of an hour on a busy two-core machine.
const rigStartTimeout = 30 * time.Minute

// setupStep is package-wide setup that another file of this package registers from its init
// function with beforeAll. TestMain runs the steps in registration order once the rig is up,
// with a scratch directory that lives until the package's tests end.
type setupStep struct {
	name string
	fn   func(dir string) error
}

var setupSteps []setupStep

// beforeAll registers a package-wide setup step (call it from init).
func beforeAll(name string, fn func(dir string) error) {
	setupSteps = append(setupSteps, setupStep{name, fn})
}

func TestMain(m *testing.M) { os.Exit(proxyproc.LogsMain(runMain(m))) }

func runMain(m *testing.M) int {
	flag.Parse()
	if run, code := rig.Gate("e2e"); !run {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), rigStartTimeout)
	defer cancel()
	began := time.Now()
	r, err := startRig(ctx)
	if err != nil {
		return rig.StartFailure("e2e", err)
	}
	if r.Owned() {
		fmt.Printf("rig: startup took %s (fetch, consul build and up)\n", time.Since(began).Round(100*time.Millisecond))
	} else {
		fmt.Printf("rig: attached to the running rig at %s (%s); it stays up\n", r.StateFile, rig.EnvAttach)
	}
	theRig = r
	if r.Owned() {
		defer func() {
			t0 := time.Now()
			if err := r.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "rig: stopping the rig failed: %v\n", err)
				return
			}
			fmt.Printf("rig: teardown took %s\n", time.Since(t0).Round(100*time.Millisecond))
		}()
	}
	// A broker that dies on its own (Pulsar's Functions worker shuts it down on errors it
	// takes for fatal) is started again, as in Kubernetes, before the next test needs it.
	defer r.KeepBrokers(func(format string, args ...any) { fmt.Printf(format+"\n", args...) })()

	if len(setupSteps) > 0 {
		dir, err := os.MkdirTemp("", "pulsar-proxy-e2e-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		for _, s := range setupSteps {
			t0 := time.Now()
			if err := s.fn(dir); err != nil {
				fmt.Fprintf(os.Stderr, "FAIL: package setup %q: %v\n", s.name, err)
				return 1
			}
			fmt.Printf("setup %s: %s\n", s.name, time.Since(t0).Round(100*time.Millisecond))
		}
	}
	if passes, ok := passesFromEnv(); ok {
		return runPasses(m, passes)
	}
	return m.Run()
}

// startRig attaches to the rig named by PULSAR_PROXY_RIG, or starts one whose brokers also
// listen for TLS (RIG_BROKERn_TLS_PORT, default 16652 and 16653; web service
// RIG_BROKERn_WEB_TLS_PORT, 18443 and 18444) with a certificate for
// 127.0.0.1 from a CA made here, require a client certificate from that CA there, decode
// PROXY protocol headers, and run the Functions worker and transaction coordinators.
func startRig(ctx context.Context) (*rig.Rig, error) {
	if os.Getenv(rig.EnvAttach) != "" {
		return rig.Start(ctx)
	}
	dir := filepath.Join(rig.DefaultDir(), "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := certs.MakeCA(dir, "rig")
	if err != nil {
		return nil, err
	}
	cert, err := ca.MakeServer("broker", time.Now().Add(23*time.Hour), "127.0.0.1") // within the CA's day
	if err != nil {
		return nil, err
	}
	if _, err := ca.MakeClient("proxy"); err != nil { // see rigProxyCert
		return nil, err
	}
	// ZooKeeper's TLS port serves the broker's certificate and wants a client certificate.
	zkStore := filepath.Join(dir, "zookeeper-keystore.pem")
	if err := concatFiles(zkStore, cert.KeyFile, cert.CertFile); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "broker-tls.conf")
	err = os.WriteFile(conf, []byte("tlsCertificateFilePath="+cert.CertFile+"\ntlsKeyFilePath="+cert.KeyFile+
		"\ntlsTrustCertsFilePath="+ca.CertFile+"\ntlsRequireTrustedClientCertOnConnect=true\nhaProxyProtocolEnabled=true\n"+
		// The brokers' own WebSocket service, the reference of the WebSocket differential.
		"webSocketServiceEnabled=true\n"), 0o600)
	if err != nil {
		return nil, err
	}
	// Both brokers run the Functions worker (thread runtime) for the Functions API tests, and
	// transaction coordinators for the transaction tests.
	env := []string{"RIG_BROKER_EXTRA_CONF=" + conf, "RIG_FUNCTIONS_WORKER=1 2", "RIG_TRANSACTIONS=1"}
	for n, port := range map[string]string{"1": "16652", "2": "16653"} {
		if os.Getenv("RIG_BROKER"+n+"_TLS_PORT") == "" {
			env = append(env, "RIG_BROKER"+n+"_TLS_PORT="+port)
		}
	}
	for n, port := range map[string]string{"1": "18443", "2": "18444"} {
		if os.Getenv("RIG_BROKER"+n+"_WEB_TLS_PORT") == "" {
			env = append(env, "RIG_BROKER"+n+"_WEB_TLS_PORT="+port)
		}
	}
	if os.Getenv("RIG_ZK_TLS_PORT") == "" {
		env = append(env, "RIG_ZK_TLS_PORT=12281", "RIG_ZK_TLS_KEYSTORE="+zkStore, "RIG_ZK_TLS_TRUSTSTORE="+ca.CertFile)
	}
	return rig.StartWith(ctx, rig.Options{Env: env})
}

func concatFiles(to string, from ...string) error {
	var b []byte
	for _, f := range from {
		part, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		b = append(b, part...)
	}
	return os.WriteFile(to, b, 0o600)
}

// rigCA is the CA file that signed the rig brokers' TLS certificate.
func rigCA() string { return filepath.Join(theRig.Dir, "tls", "rig-ca.pem") }

// rigProxyCert is the client certificate (and key) the rig's brokers accept on their TLS ports.
func rigProxyCert() (cert, key string) {
	return filepath.Join(theRig.Dir, "tls", "proxy.pem"), filepath.Join(theRig.Dir, "tls", "proxy-key.pem")
}
