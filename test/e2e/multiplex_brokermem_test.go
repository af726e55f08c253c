package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// EnvMuxMemoryClients sets how many clients TestMultiplexBrokerMemoryPerClient runs in each
// mode (default 1000).
const EnvMuxMemoryClients = "E2E_MUX_MEMORY_CLIENTS"

// TestMultiplexBrokerMemoryPerClient: the same clients (testdata/muxload, each its own
// connection to the proxy and a producer) on the same topics of broker 1, through a proxy
// with broker.multiplex and then through one without it: broker 1's JVM heap in use after a
// full GC (jcmd GC.run, GC.heap_info) and its direct memory in use (its /metrics), each
// against a baseline taken with the topics there and no client, per client. Asserted: the
// broker lists every producer, over at most multiplexConnections connections when
// multiplexed and over one connection each otherwise; the figures are logged.
func TestMultiplexBrokerMemoryPerClient(t *testing.T) {
	clients := 1000
	if v := os.Getenv(EnvMuxMemoryClients); v != "" {
		if _, err := fmt.Sscan(v, &clients); err != nil || clients < 1 {
			t.Fatalf("%s=%q: want a positive number", EnvMuxMemoryClients, v)
		}
	}
	pid, err := strconv.Atoi(theRig.State("BROKER1_PID"))
	if err != nil {
		t.Fatalf("broker 1's pid: %v", err)
	}
	names := make([]string, 10)
	for i := range names {
		names[i] = uniqueTopic(t, fmt.Sprintf("mux-mem-%d", i))
		if err := theRig.PlaceTopic(testCtx(t), names[i], 1); err != nil {
			t.Fatal(err)
		}
	}
	results := map[bool]memDelta{}
	for _, multiplex := range []bool{true, false} {
		t.Run(fmt.Sprintf("multiplex=%v", multiplex), func(t *testing.T) {
			results[multiplex] = brokerMemoryWith(t, multiplex, pid, names, clients)
		})
	}
	if t.Failed() {
		return
	}
	per := func(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/float64(clients)/1024) }
	t.Logf("RESULT broker-side memory per client (%d clients with a producer each, broker 1, baseline subtracted): multiplexed: heap %s, direct %s; a broker connection per client: heap %s, direct %s",
		clients, per(results[true].heap), per(results[true].direct), per(results[false].heap), per(results[false].direct))
}

// memDelta is what broker memory grew by.
type memDelta struct{ heap, direct int64 }

// brokerMemoryWith measures broker 1 (process pid) before and after clients clients with a
// producer each on topics connect through a proxy with or without multiplexing, checks the
// connections the broker sees, and ends the clients.
func brokerMemoryWith(t *testing.T, multiplex bool, pid int, topics []string, clients int) memDelta {
	const maxConns = 4
	yaml := "session:\n  passthrough: false\n"
	if multiplex {
		yaml = muxYAML(maxConns)
	} else {
		saved := proxyproc.Env // the suite may run with multiplexing on (E2E_MULTIPLEX)
		proxyproc.Env = nil
		t.Cleanup(func() { proxyproc.Env = saved })
	}
	heap0, direct0 := brokerMemory(t, pid, 1)
	proxy := startProxy(t, brokerURLs(), yaml)
	load := startLoads(t, proxy.PulsarURL, topics, clients, 0, 0)
	for _, l := range load {
		l.await(t, "ready", 10*time.Minute)
	}
	publishers, addrs := publisherAddrs(t, topics)
	conns := 0
	for _, a := range addrs {
		conns += len(a)
	}
	switch {
	case publishers != clients:
		t.Fatalf("broker 1 lists %d producers, want %d", publishers, clients)
	case multiplex && conns > maxConns:
		t.Fatalf("multiplexed: %d connections from the proxy, want at most %d", conns, maxConns)
	case !multiplex && conns != clients:
		t.Fatalf("a connection per client: %d connections from the proxy, want %d", conns, clients)
	}
	heap1, direct1 := brokerMemory(t, pid, 1)
	t.Logf("multiplex=%v: %d producers over %d broker connections; broker 1's heap after a full GC %s -> %s, direct memory %s -> %s",
		multiplex, publishers, conns, mib(heap0), mib(heap1), mib(direct0), mib(direct1))
	for _, l := range load {
		l.stdin.Close()
		l.cmd.Wait()
	}
	waitNoPublishers(t, topics)
	return memDelta{heap1 - heap0, direct1 - direct0}
}

// heapUsed matches G1's line in GC.heap_info: " garbage-first heap   total 1048576K, used 123456K [...".
var heapUsed = regexp.MustCompile(`heap\s+total \d+K, used (\d+)K`)

// brokerMemory is broker n's (process pid) heap in use after a full GC and its direct memory
// in use.
func brokerMemory(t *testing.T, pid, n int) (heap, direct int64) {
	t.Helper()
	for range 2 { // a second GC frees what the first one's reference processing left
		if out, err := exec.Command("jcmd", strconv.Itoa(pid), "GC.run").CombinedOutput(); err != nil {
			t.Fatalf("jcmd GC.run: %v\n%s", err, out)
		}
	}
	out, err := exec.Command("jcmd", strconv.Itoa(pid), "GC.heap_info").CombinedOutput()
	if err != nil {
		t.Fatalf("jcmd GC.heap_info: %v\n%s", err, out)
	}
	m := heapUsed.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no heap figure in GC.heap_info:\n%s", out)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	sc, err := metrics.Fetch(theRig.BrokerHTTP(n) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	d, err := sc.Value("jvm_memory_direct_bytes_used")
	if err != nil {
		t.Fatal(err)
	}
	return kb << 10, int64(d)
}

// waitNoPublishers waits until the brokers list no producer on topics.
func waitNoPublishers(t *testing.T, topics []string) {
	t.Helper()
	var n int
	if !wait.Within(2*time.Minute, func() bool {
		n, _ = publisherAddrs(t, topics)
		return n == 0
	}) {
		t.Fatalf("%d producers still on the brokers two minutes after their clients exited", n)
	}
}
