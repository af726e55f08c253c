package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// bigPayload is message i of a chunking test: n bytes derived from i, so each is distinct
// and checkable.
func bigPayload(i, n int) []byte {
	seed := sha256.Sum256([]byte(fmt.Sprint("chunk-", i)))
	return bytes.Repeat(seed[:], n/len(seed)+1)[:n]
}

// Messages larger than the brokers' 5 MiB limit, sent with chunking, arrive whole through the
// proxy, over partitions on both brokers. Chunking needs batching off: a batching producer
// does not chunk (pulsar-client-go then refuses a message over the limit).
func TestGatewayChunkedMessagesGoClient(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	topic, owners := partitionedTopicOnBothBrokers(t, "chunks", 2)
	t.Logf("partition owners: %v", owners)
	c := newClient(t, proxy.PulsarURL)
	consumer, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true,
		SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n, size = 4, 12 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range n {
		// Keys spread the messages over both partitions.
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: bigPayload(i, size), Key: fmt.Sprint(i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	got := map[string]bool{}
	for range n {
		m, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		var i int
		fmt.Sscan(m.Key(), &i)
		if !bytes.Equal(m.Payload(), bigPayload(i, size)) {
			t.Fatalf("message %s arrived altered (%d bytes)", m.Key(), len(m.Payload()))
		}
		got[m.Key()] = true
		consumer.Ack(m)
	}
	if len(got) != n {
		t.Fatalf("received %d distinct messages of %d", len(got), n)
	}
}

// The same with the Python client (pulsar-client, pinned): 12 MiB messages with chunking,
// round robin over partitions on both brokers.
func TestGatewayChunkedMessagesPythonClient(t *testing.T) {
	py := needPython(t)
	proxy := startProxy(t, brokerURLs(), "")
	topic, owners := partitionedTopicOnBothBrokers(t, "pychunks", 2)
	const n = 4
	s := runPy(t, py, "--url", proxy.PulsarURL, "--topic", topic, "--count", strconv.Itoa(n),
		"--size", strconv.Itoa(12<<20), "--chunking", "--timeout", "300")
	if s.Sent != n || s.Received != n {
		t.Fatalf("sent %d, received %d of %d", s.Sent, s.Received, n)
	}
	if byBroker := brokersOf(t, s.Partitions, owners); byBroker[1] == 0 || byBroker[2] == 0 {
		t.Errorf("messages by owning broker %v; want both", byBroker)
	}
}

// The same with the Java client (ChunkClient.java, compiled at test time against the rig's
// Pulsar jars).
func TestGatewayChunkedMessagesJavaClient(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	topic, owners := partitionedTopicOnBothBrokers(t, "javachunks", 2)
	t.Logf("partition owners: %v", owners)
	out := runJavaProbe(t, "ChunkClient", proxy.PulsarURL, topic, "4", strconv.Itoa(12<<20))
	// The client logs to standard output too; its verdict is a line of its own.
	if !slices.Contains(strings.Split(out, "\n"), "ok 4") {
		t.Fatalf("ChunkClient did not report all 4 messages whole:\n%s", tailOf([]byte(out), 3000))
	}
}

// runJavaProbe compiles testdata/NAME.java against the rig's Pulsar classpath and runs it
// with args, returning its standard output.
func runJavaProbe(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	prog, err := rig.CompileJava(ctx, filepath.Join("testdata", name+".java"))
	rig.Need(t, "the Java client", err)
	java := prog.Command(ctx, args...)
	var stderr bytes.Buffer
	java.Stderr = &stderr
	out, err := java.Output()
	if err != nil {
		// Its own output last: the steps it reached and why it failed.
		t.Fatalf("java %s: %v\nstderr tail:\n%s\nstdout:\n%s", name, err, tailOf(stderr.Bytes(), 2000), out)
	}
	return string(out)
}
