// Package e2esni holds the end-to-end tests of the SNI plane (listen.pulsarSNI): a rig of its
// own whose brokers serve TLS under names of their own (broker1.rig.test, broker2.rig.test,
// each with its own certificate, both also pulsar.rig.test, the service name), so that a
// client's server name says which broker it wants. Those names must resolve for the brokers
// (their internal clients dial their advertised addresses) and for the proxy (discovery's
// hosts), and nothing on this machine's /etc/hosts is ours to edit: TestMain runs the package
// again inside a user, network and mount namespace of its own (unshare -rnm), where a hosts
// file written here is bind-mounted over /etc/hosts. The network namespace gives the rig its
// fixed ports without colliding with anyone else's.
//
// A second rig, started beside the first, is a second Pulsar cluster (cluster-b: one broker,
// broker1.b.rig.test, with a bookie and a ZooKeeper of its own) for geo-replication from the
// first (cluster-a) through the SNI listener.
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

// The clusters, and cluster B's names (its broker's and its service name): each cluster has
// its own ZooKeeper, which is both its metadata and its configuration store, so that nothing
// but the replication itself links the two.
const (
	clusterA     = "cluster-a"
	clusterB     = "cluster-b"
	brokerBName  = "broker1.b.rig.test"
	serviceBName = "pulsar.b.rig.test"
)

// Cluster B's ports (its rig has no broker 2 and no Consul).
const (
	brokerBPort    = "26650"
	brokerBTLSPort = "26652"
	brokerBHTTP    = "28080"
	zkBPort        = "22181"
	bookieBPort    = "23181"
)

// The brokers' TLS ports (the rig's defaults for the rest: the namespace has them to itself).
const (
	broker1TLSPort = "16652"
	broker2TLSPort = "16653"
)

var (
	theRig      *rig.Rig
	rigB        *rig.Rig // cluster B
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
	a, b, err := startRigs(ctx)
	for _, r := range []*rig.Rig{a, b} {
		if r != nil {
			defer func() {
				if err := r.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "rig: stopping the SNI rig in %s failed: %v\n", r.Dir, err)
				}
			}()
		}
	}
	if err != nil {
		return rig.StartFailure("e2esni", err)
	}
	theRig, rigB = a, b
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
	content := "127.0.0.1 localhost " + broker1Name + " " + broker2Name + " " + serviceName + " " + brokerBName + " " + serviceBName + "\n" +
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

// startRigs starts the two clusters side by side (one wait for both). Cluster A: TLS ports on
// both brokers under their own names, each with a certificate for its name and the service
// name. Cluster B: one broker, the same way under its names. Client certificates of the same
// CA are authenticated (AuthenticationProviderTls, the role its CN), clients without one are
// the anonymous role. Authorization is off: the tests are about who the broker sees. On error
// the rigs that did start are returned, for the caller to stop.
func startRigs(ctx context.Context) (a, b *rig.Rig, err error) {
	dir := rig.PrivateDir("RIG_SNI_DIR", "rig-sni")
	tlsDir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, nil, err
	}
	if ca, err = certs.MakeCA(tlsDir, "sni-rig"); err != nil {
		return nil, nil, err
	}
	shared := filepath.Join(tlsDir, "brokers.conf")
	if err := os.WriteFile(shared, []byte("tlsTrustCertsFilePath="+ca.CertFile+"\n"+
		"authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls\n"+
		"anonymousUserRole=anonymous\nauthorizationEnabled=false\ntlsRequireTrustedClientCertOnConnect=false\n"), 0o600); err != nil {
		return nil, nil, err
	}
	envA := []string{"RIG_CLUSTER=" + clusterA, "RIG_BROKER_EXTRA_CONF=" + shared,
		"RIG_BROKER1_TLS_PORT=" + broker1TLSPort, "RIG_BROKER2_TLS_PORT=" + broker2TLSPort,
		"RIG_BROKER1_HOST=" + broker1Name, "RIG_BROKER2_HOST=" + broker2Name}
	envB := []string{"RIG_CLUSTER=" + clusterB, "RIG_BROKER_EXTRA_CONF=" + shared, "RIG_BROKERS=1", "RIG_CONSUL=0",
		"RIG_BROKER1_HOST=" + brokerBName, "RIG_BROKER1_PORT=" + brokerBPort, "RIG_BROKER1_TLS_PORT=" + brokerBTLSPort,
		"RIG_BROKER1_HTTP_PORT=" + brokerBHTTP, "RIG_ZK_PORT=" + zkBPort, "RIG_BOOKIE_PORT=" + bookieBPort,
		// One broker that carries one replicated topic: a smaller JVM than cluster A's.
		"RIG_BROKER1_HEAP=512m", "RIG_BROKER_DIRECT_MEMORY=512m"}
	for _, c := range []struct {
		env                 *[]string
		file, name, service string
		n                   string
	}{
		{&envA, "broker1", broker1Name, serviceName, "1"},
		{&envA, "broker2", broker2Name, serviceName, "2"},
		{&envB, "brokerB", brokerBName, serviceBName, "1"},
	} {
		conf, err := brokerCertConf(tlsDir, c.file, c.name, c.service)
		if err != nil {
			return nil, nil, err
		}
		*c.env = append(*c.env, "RIG_BROKER"+c.n+"_EXTRA_CONF="+conf)
	}
	return startBoth(ctx, rig.Options{Dir: dir, Env: envA},
		rig.Options{Dir: rig.PrivateDir("RIG_SNI_B_DIR", "rig-sni-b"), Env: envB})
}

// brokerCertConf writes a broker's certificate for its name and the service name, and the
// broker config lines that name it.
func brokerCertConf(tlsDir, file, name, service string) (string, error) {
	cert, err := ca.MakeServer(file, time.Now().Add(23*time.Hour), name, service)
	if err != nil {
		return "", err
	}
	conf := filepath.Join(tlsDir, file+".conf")
	return conf, os.WriteFile(conf, []byte("tlsCertificateFilePath="+cert.CertFile+"\ntlsKeyFilePath="+cert.KeyFile+"\n"), 0o600)
}

// startBoth starts two rigs at once and waits for both.
func startBoth(ctx context.Context, optsA, optsB rig.Options) (a, b *rig.Rig, err error) {
	type started struct {
		r   *rig.Rig
		err error
	}
	done := make(chan started, 1)
	go func() {
		r, err := rig.StartWith(ctx, optsB)
		done <- started{r, err}
	}()
	a, errA := rig.StartWith(ctx, optsA)
	sb := <-done
	if errA != nil {
		return a, sb.r, fmt.Errorf("cluster A: %w", errA)
	}
	if sb.err != nil {
		return a, sb.r, fmt.Errorf("cluster B: %w", sb.err)
	}
	return a, sb.r, nil
}
