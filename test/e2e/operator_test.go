package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

// runProxy runs the proxy binary with args (a subcommand) and returns its exit code and output.
func runProxy(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(proxyBinary, args...)
	cmd.Env = append(proxyproc.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckConfigConnectsToTheRig: check-config --connect runs discovery (static and Consul)
// and completes a CONNECT with each of the rig's brokers (exit 0); a Consul service with no
// broker and a stopped broker are exit 3 with the reason.
func TestCheckConfigConnectsToTheRig(t *testing.T) {
	static := writeConfig(t, fmt.Sprintf("discovery:\n  static:\n    brokers: [%q, %q]\nbroker:\n  allowedPorts: [%s]\n",
		brokerURLs()[0], brokerURLs()[1], rigPorts()))
	code, stdout, stderr := runProxy(t, nil, "check-config", "--connect", static)
	if code != 0 || strings.Count(stderr, "CONNECTED (server \"Pulsar Server") != 2 || !strings.Contains(stdout, "discovery:") {
		t.Fatalf("check-config --connect with the rig's brokers: exit %d\n%s", code, stderr)
	}
	t.Logf("check-config --connect, static discovery:\n%s", stderr)

	service := rigServiceName(t)
	registerBothBrokers(t, service)
	consul := func(service string) string {
		return writeConfig(t, fmt.Sprintf("discovery:\n  consul:\n    service: %q\n    address: %q\nbroker:\n  allowedPorts: [%s]\n",
			service, theRig.ConsulAddr, rigPorts()))
	}
	if code, _, stderr := runProxy(t, nil, "check-config", "--connect", "--quiet", consul(service)); code != 0 ||
		!strings.Contains(stderr, "discovery.consul: 2 broker(s)") || strings.Count(stderr, "CONNECTED") != 2 {
		t.Fatalf("check-config --connect with Consul discovery: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := runProxy(t, nil, "check-config", "--connect", "--quiet", "--connect-timeout", "3s", consul(service+"-nobody")); code != 3 ||
		!strings.Contains(stderr, "discovery lists no broker") {
		t.Fatalf("check-config --connect with a Consul service without brokers: exit %d (want 3)\n%s", code, stderr)
	}

	// A stopped broker: the configuration is valid, the broker does not answer.
	only2 := writeConfig(t, fmt.Sprintf("discovery:\n  static:\n    brokers: [%q]\nbroker:\n  allowedPorts: [%s]\n", brokerURLs()[1], rigPorts()))
	stopBroker2(t)
	code, _, stderr = runProxy(t, nil, "check-config", "--connect", "--quiet", only2)
	if code != 3 || !strings.Contains(stderr, "CONNECT failed: unreachable") || !strings.Contains(stderr, "no broker completed a CONNECT") {
		t.Fatalf("check-config --connect with broker 2 stopped: exit %d (want 3)\n%s", code, stderr)
	}
	t.Logf("check-config --connect, broker stopped:\n%s", stderr)
	// Without --connect the same file is fine: nothing is dialled.
	if code, _, stderr := runProxy(t, nil, "check-config", "--quiet", only2); code != 0 {
		t.Fatalf("check-config without --connect: exit %d\n%s", code, stderr)
	}
}

// rigServiceName is a Consul service name of this test's own.
func rigServiceName(t *testing.T) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
}

// TestConvertedJavaProxyConfigServesClients converts the configuration the benchmark runs
// Apache's proxy with (bench/java-proxy.conf, filled in for the rig as the benchmark does,
// on free ports), checks it with check-config --connect, runs the proxy with exactly that
// file, and produces and consumes through it.
func TestConvertedJavaProxyConfigServesClients(t *testing.T) {
	tmpl, err := os.ReadFile(filepath.Join(proxyproc.RepoRoot(), "bench", "java-proxy.conf"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{"clusterName": theRig.Cluster, "brokerServiceURL": theRig.BrokerURL(1),
		"brokerWebServiceURL": theRig.BrokerHTTP(1), "servicePort": "0", "webServicePort": "0"}
	conf := os.Expand(string(tmpl), func(k string) string {
		v, ok := values[k]
		if !ok {
			t.Fatalf("bench/java-proxy.conf names ${%s}, which this test does not fill in", k)
		}
		return v
	})
	dir := t.TempDir()
	confPath := filepath.Join(dir, "proxy.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	code, _, report := runProxy(t, nil, "convert-config", "-o", cfgPath, confPath)
	if code != 0 {
		t.Fatalf("convert-config: exit %d\n%s", code, report)
	}
	t.Logf("convert-config report:\n%s", report)
	converted, _ := os.ReadFile(cfgPath)
	t.Logf("converted config.yaml:\n%s", converted)
	if code, _, stderr := runProxy(t, nil, "check-config", "--connect", "--quiet", cfgPath); code != 0 {
		t.Fatalf("check-config --connect of the converted file: exit %d\n%s", code, stderr)
	}

	// The benchmark's Java proxy serves broker 1 (the only broker its file names, on a port
	// its '*' allowed): so does the converted file.
	topic := uniqueTopic(t, "converted")
	if err := theRig.PlaceTopic(testCtx(t), topic, 1); err != nil {
		t.Fatal(err)
	}
	p, err := proxyproc.StartConfig(proxyBinary, t.TempDir(), cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Stop() {
			t.Error("pulsar-proxy did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("proxy log tail:\n%s", p.LogTail(40))
		}
	})
	if !strings.HasPrefix(p.Addr, "127.0.0.1:") {
		t.Errorf("the converted file listens on %s, want loopback as bindAddress says", p.Addr)
	}
	c := newClient(t, p.PulsarURL)
	consumer := subscribe(t, c, topic, "converted", pulsar.Exclusive)
	consumeAll(t, consumer, produce(t, c, topic, 100))
}
