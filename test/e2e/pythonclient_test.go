package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// The Python client (pulsar-client, a wrapper of the C++ client) through the proxy, with
// pyclient.py from test/rig. Its virtualenv is prepared once for the package.
var (
	pyClient    *rig.PyClient
	pyClientErr error
)

func init() {
	beforeAll("python client", func(string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		pyClient, pyClientErr = rig.PythonClient(ctx)
		return nil // needPython reports it, so only the Python tests skip or fail
	})
}

// needPython returns the Python client or ends the test: a skip that names what is missing
// outside CI, a failure on CI or when the install itself failed.
func needPython(t *testing.T) *rig.PyClient {
	t.Helper()
	rig.Need(t, "the Python client", pyClientErr)
	return pyClient
}

// runPy runs pyclient.py and returns its summary; the test fails when the program does.
func runPy(t *testing.T, py *rig.PyClient, args ...string) rig.PySummary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, stderr, err := py.Run(ctx, args...)
	if err != nil {
		t.Fatalf("%v\nclient log tail:\n%s", err, tailOf(stderr, 3000))
	}
	t.Logf("pyclient %s of %d: sent %d, received %d in %.1fs (client %s)", s.Mode, s.Count, s.Sent, s.Received, s.Seconds, s.Client)
	return s
}

// brokersOf maps the partitions a consumer received from to the brokers that own them.
func brokersOf(t *testing.T, partitions map[string]int, owners []int) map[int]int {
	t.Helper()
	byBroker := map[int]int{}
	for topic, n := range partitions {
		_, idx, ok := strings.Cut(topic, "-partition-")
		p, err := strconv.Atoi(idx)
		if !ok || err != nil || p >= len(owners) {
			t.Fatalf("message from %q, not a partition of the topic", topic)
		}
		byBroker[owners[p]] += n
	}
	return byBroker
}

// TestPythonClientPartitionedTopicThroughProxy: the Python client, given the proxy as its
// service URL, produces 1,000 messages to a topic whose partitions live on both brokers and
// receives every one intact, in order per partition.
func TestPythonClientPartitionedTopicThroughProxy(t *testing.T) {
	py := needPython(t)
	proxy := startProxy(t, brokerURLs(), "")
	topic, owners := partitionedTopicOnBothBrokers(t, "py", 4)

	const n = 1000
	s := runPy(t, py, "--url", proxy.PulsarURL, "--topic", topic, "--count", strconv.Itoa(n))
	if s.Sent != n || s.Received != n {
		t.Fatalf("sent %d, received %d of %d", s.Sent, s.Received, n)
	}
	byBroker := brokersOf(t, s.Partitions, owners)
	if byBroker[1] == 0 || byBroker[2] == 0 {
		t.Errorf("messages by owning broker %v; want both brokers to serve some", byBroker)
	}
	for _, b := range brokerAddrs() {
		if v := proxy.metric(t, "pulsar_proxy_broker_sessions_total", fmt.Sprintf("broker=%q", b)); v < 1 {
			t.Errorf("no direct session to %s through the proxy", b)
		}
	}
}

// TestPythonClientInteropWithGoClient: through the proxy, the Go client consumes what the
// Python client produced, and the Python client consumes what the Go client produced, byte
// for byte, on a topic spread over both brokers.
func TestPythonClientInteropWithGoClient(t *testing.T) {
	py := needPython(t)
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	const n = 500

	pyToGo, _ := partitionedTopicOnBothBrokers(t, "py2go", 4)
	goConsumer := subscribe(t, c, pyToGo, "go", pulsar.Exclusive)
	runPy(t, py, "--url", proxy.PulsarURL, "--topic", pyToGo, "--count", strconv.Itoa(n), "--mode", "produce", "--prefix", "py")
	receivePyPayloads(t, goConsumer, "py", n)

	// The Python consumer subscribes at the earliest position, after the Go producer is done.
	goToPy, _ := partitionedTopicOnBothBrokers(t, "go2py", 4)
	produceWith(t, c, goToPy, n, func(i int) []byte { return rig.PyPayload("go", i) })
	s := runPy(t, py, "--url", proxy.PulsarURL, "--topic", goToPy, "--count", strconv.Itoa(n), "--mode", "consume", "--prefix", "go")
	if s.Received != n {
		t.Fatalf("the Python client received %d of the %d messages the Go client sent", s.Received, n)
	}
}

// receivePyPayloads receives n messages and checks each against rig.PyPayload(prefix, i),
// i taken from the "i" property the Python client sets.
func receivePyPayloads(t *testing.T, consumer pulsar.Consumer, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := make(map[int]bool, n)
	for len(got) < n {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("the Go client received %d of the %d messages the Python client sent: %v", len(got), n, err)
		}
		consumer.Ack(msg)
		i, err := strconv.Atoi(msg.Properties()["i"])
		if err != nil || i < 0 || i >= n || got[i] {
			t.Fatalf("unexpected or repeated message, property i=%q", msg.Properties()["i"])
		}
		if !bytes.Equal(msg.Payload(), rig.PyPayload(prefix, i)) {
			t.Fatalf("message %d: payload differs from what the Python client sent", i)
		}
		got[i] = true
	}
}

// produceWith sends n messages asynchronously through one producer and waits for every receipt.
func produceWith(t *testing.T, c pulsar.Client, topic string, n int, payload func(int) []byte) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer p.Close()
	errs := make(chan error, n)
	for i := range n {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload(i)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

// tlsProxyYAML is the proxy's TLS listener with server (and, with clientCA, required client
// certificates).
func tlsProxyYAML(server certs.Pair, clientCA string) string {
	y := fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n", server.CertFile, server.KeyFile)
	if clientCA != "" {
		y += fmt.Sprintf("  clientCAFile: %q\n  clientAuth: require\n", clientCA)
	}
	return y
}

// TestPythonClientTLSThroughProxy: the Python client over pulsar+ssl:// to the proxy's TLS
// listener, the certificate checked against the test CA with hostname verification; a
// certificate for another host is refused, so the check is real.
func TestPythonClientTLSThroughProxy(t *testing.T) {
	py := needPython(t)
	ca := certs.NewCA(t, t.TempDir(), "ca")
	proxy := startProxy(t, brokerURLs(), tlsProxyYAML(ca.Server(t, "proxy", time.Now().Add(time.Hour)), ""))
	if proxy.PulsarTLSURL == "" {
		t.Fatal("no TLS listener started")
	}
	topic, _ := partitionedTopicOnBothBrokers(t, "pytls", 4)
	const n = 500
	s := runPy(t, py, "--url", proxy.PulsarTLSURL, "--topic", topic, "--count", strconv.Itoa(n), "--trust-file", ca.CertFile)
	if s.Received != n {
		t.Fatalf("received %d of %d", s.Received, n)
	}
	if v := proxy.metric(t, "pulsar_proxy_tls_handshakes_total", `result="ok"`); v < 1 {
		t.Errorf("%v successful TLS handshakes counted", v)
	}

	wrongHost := startProxy(t, brokerURLs(), tlsProxyYAML(ca.ServerFor(t, "elsewhere", time.Now().Add(time.Hour), "elsewhere.invalid"), ""))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, stderr, err := py.Run(ctx, "--url", wrongHost.PulsarTLSURL, "--topic", uniqueTopic(t, "pytlswrong"), "--count", "1",
		"--trust-file", ca.CertFile, "--operation-timeout", "10")
	if err == nil || s.Error == "" {
		t.Fatalf("the Python client accepted a certificate for elsewhere.invalid at %s: %+v\n%s", wrongHost.PulsarTLSURL, s, tailOf(stderr, 2000))
	}
	if !bytes.Contains(stderr, []byte("certificate verify failed")) {
		t.Errorf("the Python client failed, but not on the certificate (%s):\n%s", s.Error, tailOf(stderr, 2000))
	}
}

// TestPythonClientMutualTLSThroughProxy: the proxy requires a client certificate; the Python
// client presents one (tls_certificate_file_path) and its messages get through.
func TestPythonClientMutualTLSThroughProxy(t *testing.T) {
	py := needPython(t)
	ca := certs.NewCA(t, t.TempDir(), "ca")
	client := ca.Client(t, "python")
	proxy := startProxy(t, brokerURLs(), tlsProxyYAML(ca.Server(t, "proxy", time.Now().Add(time.Hour)), ca.CertFile))
	const n = 100
	s := runPy(t, py, "--url", proxy.PulsarTLSURL, "--topic", uniqueTopic(t, "pymtls"), "--count", strconv.Itoa(n),
		"--trust-file", ca.CertFile, "--cert-file", client.CertFile, "--key-file", client.KeyFile)
	if s.Received != n {
		t.Fatalf("received %d of %d", s.Received, n)
	}
}
