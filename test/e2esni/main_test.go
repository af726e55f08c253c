// Package e2esni holds the end-to-end tests of the SNI plane (listen.pulsarSNI): a rig of its
// own whose brokers serve TLS under names of their own (broker1.rig.test, broker2.rig.test,
// each with its own certificate, both also pulsar.rig.test, the service name), so that a
// client's server name says which broker it wants. Those names must resolve for the brokers
// (their internal clients dial their advertised addresses) and for the proxy (discovery's
// hosts), and nothing on this machine's /etc/hosts is ours to edit: TestMain runs the package
// again inside a user, network and mount namespace of its own (unshare -rnm), where a hosts
// file written here is bind-mounted over /etc/hosts. The network namespace gives the rig its
// fixed ports without colliding with anyone else's.
package e2esni

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// envHosts, set in the namespaced run, names the hosts file to mount over /etc/hosts.
const envHosts = "E2ESNI_HOSTS_FILE"

// The names of the rig: each broker's, the service name, and a name that is no broker (it
// resolves to decoy, where recording listeners sit on the ports a careless relay might try).
const (
	broker1Name = "broker1.rig.test"
	broker2Name = "broker2.rig.test"
	serviceName = "pulsar.rig.test"
	notABroker  = "not-a-broker.rig.test"
	decoy       = "127.0.0.2"
)

// The brokers' TLS ports (the rig's defaults for the rest: the namespace has them to itself).
const (
	broker1TLSPort = "16652"
	broker2TLSPort = "16653"
)

var (
	theRig      *rig.Rig
	ca          *certs.CA
	proxyBinary string
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	if run, code := rig.Gate("e2esni"); !run {
		return code
	}
	if os.Getenv(envHosts) == "" {
		return inNamespace()
	}
	if err := enterNamespace(os.Getenv(envHosts)); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: e2esni: preparing the namespace:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	r, err := startRig(ctx)
	if err != nil {
		return rig.StartFailure("e2esni", err)
	}
	theRig = r
	defer func() {
		if err := r.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "rig: stopping the SNI rig failed: %v\n", err)
		}
	}()
	bin, remove, err := proxyproc.BuildTemp("pulsar-proxy-e2esni-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer remove()
	proxyBinary = bin
	return m.Run()
}

// inNamespace runs this test binary again, with the same arguments, inside a user, network
// and mount namespace (unshare -rnm), and returns its exit code. A machine without unshare
// (or one that refuses namespaces) is a missing prerequisite.
func inNamespace() int {
	if _, err := exec.LookPath("unshare"); err != nil {
		return rig.StartFailure("e2esni", &rig.PrereqError{Reason: "unshare is not on PATH (util-linux): the SNI rig runs in a namespace of its own"})
	}
	dir, err := os.MkdirTemp("", "e2esni-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	hosts := filepath.Join(dir, "hosts")
	content := "127.0.0.1 localhost " + broker1Name + " " + broker2Name + " " + serviceName + "\n" +
		decoy + " " + notABroker + "\n::1 localhost ip6-localhost\n"
	if err := os.WriteFile(hosts, []byte(content), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	cmd := exec.Command("unshare", append([]string{"-rnm", "--", os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), envHosts+"="+hosts)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return ee.ExitCode()
	}
	return rig.StartFailure("e2esni", &rig.PrereqError{Reason: "unshare -rnm failed (namespaces refused?): " + err.Error()})
}

// enterNamespace finishes the namespace: loopback up, the hosts file over /etc/hosts, and a
// check that the names resolve as the rig needs.
func enterNamespace(hosts string) error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	if err := syscall.Mount(hosts, "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mounting %s over /etc/hosts: %w", hosts, err)
	}
	for name, want := range map[string]string{broker1Name: "127.0.0.1", notABroker: decoy} {
		addrs, err := net.LookupHost(name)
		if err != nil || len(addrs) == 0 || addrs[0] != want {
			return fmt.Errorf("%s resolves to %v (%v), want %s", name, addrs, err, want)
		}
	}
	return nil
}

// startRig starts the SNI rig: TLS ports on both brokers under their own names, each with a
// certificate for its name and the service name; client certificates of the same CA are
// authenticated (AuthenticationProviderTls, the role its CN), clients without one are the
// anonymous role. Authorization is off: the tests are about who the broker sees.
func startRig(ctx context.Context) (*rig.Rig, error) {
	dir := rig.PrivateDir("RIG_SNI_DIR", "rig-sni")
	tlsDir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if ca, err = certs.MakeCA(tlsDir, "sni-rig"); err != nil {
		return nil, err
	}
	shared := filepath.Join(tlsDir, "brokers.conf")
	if err := os.WriteFile(shared, []byte("tlsTrustCertsFilePath="+ca.CertFile+"\n"+
		"authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls\n"+
		"anonymousUserRole=anonymous\nauthorizationEnabled=false\ntlsRequireTrustedClientCertOnConnect=false\n"), 0o600); err != nil {
		return nil, err
	}
	env := []string{"RIG_BROKER_EXTRA_CONF=" + shared, "RIG_BROKER1_TLS_PORT=" + broker1TLSPort, "RIG_BROKER2_TLS_PORT=" + broker2TLSPort,
		"RIG_BROKER1_HOST=" + broker1Name, "RIG_BROKER2_HOST=" + broker2Name}
	for n, name := range map[string]string{"1": broker1Name, "2": broker2Name} {
		cert, err := ca.MakeServer("broker"+n, time.Now().Add(23*time.Hour), name, serviceName)
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(tlsDir, "broker"+n+".conf")
		if err := os.WriteFile(conf, []byte("tlsCertificateFilePath="+cert.CertFile+"\ntlsKeyFilePath="+cert.KeyFile+"\n"), 0o600); err != nil {
			return nil, err
		}
		env = append(env, "RIG_BROKER"+n+"_EXTRA_CONF="+conf)
	}
	return rig.StartWith(ctx, rig.Options{Dir: dir, Env: env})
}
