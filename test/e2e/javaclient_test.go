package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// TestGatewayJavaClientPulsarPerf: the Java client (pulsar-perf from the rig's jars) produces
// through the proxy, with the proxy as its service URL; a Go consumer gets every message.
func TestGatewayJavaClientPulsarPerf(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "perf")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)

	const n = 2000
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, err := rig.PerfCommand(ctx, dir, "", "produce", "-u", proxy.PulsarURL,
		"-r", "1000", "-m", "2000", "-s", "512", topic)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "perf.log"))
		t.Fatalf("pulsar-perf produce through the proxy: %v\n%s\n%s", err, tailOf(out, 2000), tailOf(log, 4000))
	}

	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	for i := range n {
		msg, err := consumer.Receive(rctx)
		if err != nil {
			t.Fatalf("received %d of %d messages pulsar-perf sent: %v", i, n, err)
		}
		if len(msg.Payload()) != 512 {
			t.Fatalf("message %d has %d bytes, pulsar-perf sent 512", i, len(msg.Payload()))
		}
		consumer.Ack(msg)
	}
	if v := proxy.metric(t, "pulsar_proxy_lookups_total", `type="LOOKUP"`, `result="ok"`); v < 2 {
		t.Errorf("LOOKUPs through the proxy = %v, want the Go and the Java client's", v)
	}
}

func tailOf(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
