package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
	"github.com/pulsar-proxy/pulsar-proxy/test/wsclient"
)

// The WebSocket API through the proxy: messages crossing APIs, a client that never reads,
// a topic unloaded under a producer and a consumer.

const wsCrossCount = 100

// wsProxy starts a proxy with the WebSocket API on and returns it with its ws:// base.
func wsProxy(t *testing.T, extra string) (*proxy, string) {
	p := startProxy(t, brokerURLs(), wsProxyYAML+extra)
	return p, "ws" + strings.TrimPrefix(p.HTTPURL, "http")
}

// wsProduceScheme produces pyclient.py's payload scheme over WebSocket: message i with key i
// and property i.
func wsProduceScheme(t *testing.T, ctx context.Context, base, topic, prefix string, n int) {
	t.Helper()
	p := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", nil))
	for i := 0; i < n; i++ {
		wsSend(t, ctx, p, map[string]any{"payload": wsclient.Payload(rig.PyPayload(prefix, i)), "key": strconv.Itoa(i),
			"properties": map[string]string{"i": strconv.Itoa(i)}})
	}
	for i := 0; i < n; i++ {
		if a := wsNext(t, ctx, p); a["result"] != "ok" {
			t.Fatalf("message %d: %v", i, a)
		}
	}
	p.Close()
}

// wsConsumeScheme receives n messages of the scheme over WebSocket from the earliest one
// and checks each (checkKey: the key and property too).
func wsConsumeScheme(t *testing.T, ctx context.Context, base, topic, prefix string, n int, checkKey bool) {
	t.Helper()
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "ws", wsQ("subscriptionInitialPosition", "Earliest")))
	seen := map[int]bool{}
	for len(seen) < n {
		m := wsNextWithin(t, ctx, c, 2*time.Minute)
		data := wsclient.Decoded(m)
		i, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(string(data), prefix+"-"), "-", 2)[0])
		if err != nil || !bytes.Equal(data, rig.PyPayload(prefix, i)) {
			t.Fatalf("message %q is not one of %s's", data, prefix)
		}
		props, _ := m["properties"].(map[string]any)
		if checkKey && (m["key"] != strconv.Itoa(i) || props["i"] != strconv.Itoa(i)) {
			t.Fatalf("message %d arrived with key %v and properties %v", i, m["key"], props)
		}
		seen[i] = true
		wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	}
}

// TestWebSocketCrossAPI: messages produced over WebSocket are consumed by the Go, Java and
// Python clients through the proxy, intact with their keys and properties; and messages
// those clients produce (Go and Java batched and LZ4-compressed) reach a WebSocket consumer.
func TestWebSocketCrossAPI(t *testing.T) {
	p, base := wsProxy(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	out := uniqueTopic(t, "ws-out")
	wsProduceScheme(t, ctx, base, out, "ws", wsCrossCount)
	t.Run("to Go", func(t *testing.T) { goConsumeScheme(t, ctx, p.PulsarURL, out, "ws", wsCrossCount) })
	t.Run("to Python", func(t *testing.T) {
		s := runPy(t, needPython(t), "--url", p.PulsarURL, "--topic", out, "--mode", "consume", "--prefix", "ws", "--count", strconv.Itoa(wsCrossCount))
		if s.Received != wsCrossCount {
			t.Fatalf("Python received %d of %d", s.Received, wsCrossCount)
		}
	})
	t.Run("to Java", func(t *testing.T) {
		if o := runJavaProbe(t, "CrossClient", p.PulsarURL, out, "consume", strconv.Itoa(wsCrossCount), "ws"); !hasLine(o, fmt.Sprint("ok ", wsCrossCount)) {
			t.Fatalf("CrossClient:\n%s", tailOf([]byte(o), 3000))
		}
	})
	t.Run("from Go", func(t *testing.T) {
		topic := uniqueTopic(t, "ws-from-go")
		goProduceScheme(t, ctx, p.PulsarURL, topic, "go", wsCrossCount)
		wsConsumeScheme(t, ctx, base, topic, "go", wsCrossCount, true)
	})
	t.Run("from Python", func(t *testing.T) {
		topic := uniqueTopic(t, "ws-from-py")
		runPy(t, needPython(t), "--url", p.PulsarURL, "--topic", topic, "--mode", "produce", "--prefix", "py", "--count", strconv.Itoa(wsCrossCount))
		wsConsumeScheme(t, ctx, base, topic, "py", wsCrossCount, false)
	})
	t.Run("from Java", func(t *testing.T) {
		topic := uniqueTopic(t, "ws-from-java")
		if o := runJavaProbe(t, "CrossClient", p.PulsarURL, topic, "produce", strconv.Itoa(wsCrossCount), "java"); !hasLine(o, fmt.Sprint("ok ", wsCrossCount)) {
			t.Fatalf("CrossClient:\n%s", tailOf([]byte(o), 3000))
		}
		wsConsumeScheme(t, ctx, base, topic, "java", wsCrossCount, true)
	})
}

func hasLine(out, line string) bool { return slices.Contains(strings.Split(out, "\n"), line) }

func goConsumeScheme(t *testing.T, ctx context.Context, url, topic, prefix string, n int) {
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "go", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		m, err := c.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d messages: %v", i, err)
		}
		if !bytes.Equal(m.Payload(), rig.PyPayload(prefix, i)) || m.Key() != strconv.Itoa(i) || m.Properties()["i"] != strconv.Itoa(i) {
			t.Fatalf("message %d arrived as %q key %q properties %v", i, m.Payload(), m.Key(), m.Properties())
		}
		c.Ack(m)
	}
}

func goProduceScheme(t *testing.T, ctx context.Context, url, topic, prefix string, n int) {
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, CompressionType: pulsar.LZ4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < n; i++ {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: rig.PyPayload(prefix, i), Key: strconv.Itoa(i),
			Properties: map[string]string{"i": strconv.Itoa(i)}}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWebSocketNeverReadingClientBounded: a consumer that never reads holds at the proxy no
// more than its receiver queue (pulsar_proxy_websocket_buffered_bytes), however much the
// topic has for it.
func TestWebSocketNeverReadingClientBounded(t *testing.T) {
	p, base := wsProxy(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := uniqueTopic(t, "ws-never-reads")
	const queue, size, n = 20, 64 << 10, 400 // 25 MiB produced; 1.25 MiB may wait at the proxy
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", wsQ("receiverQueueSize", strconv.Itoa(queue))))
	_ = c // it never reads
	pr := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", nil))
	body := wsclient.Payload(bytes.Repeat([]byte("x"), size))
	for i := 0; i < n; i++ {
		wsSend(t, ctx, pr, map[string]any{"payload": body})
		if a := wsNext(t, ctx, pr); a["result"] != "ok" {
			t.Fatalf("message %d: %v", i, a)
		}
	}
	// The socket buffers fill, the proxy's writes block, its queue fills up to the receiver
	// queue and then it grants no more permits: the buffered bytes level off.
	limit := float64(queue * (size + 1024)) // the payloads, and what each message costs besides
	var last float64
	steady := 0
	wait.Until(t, 2*time.Minute, "the proxy's buffered bytes to level off", func() bool {
		v := p.metric(t, "pulsar_proxy_websocket_buffered_bytes")
		if v > limit {
			t.Fatalf("the proxy holds %.0f bytes for a client that never reads, over its receiver queue's %.0f", v, limit)
		}
		if v > 0 && v == last {
			steady++
		} else {
			steady = 0
		}
		last = v
		time.Sleep(300 * time.Millisecond)
		return steady >= 3
	})
	t.Logf("held at the proxy for the never-reading client: %.0f bytes (bound %.0f)", last, limit)
}

// TestWebSocketClientThatAcksButNeverReadsIsClosed: a consumer's client that sends acks
// (each resets the idle timeout) but reads nothing cannot hold its session, and the
// consumer at the brokers, for good: a write it does not take within the idle timeout
// closes the session.
func TestWebSocketClientThatAcksButNeverReadsIsClosed(t *testing.T) {
	p, base := wsProxy(t, "  sessionIdleTimeout: 4s\n")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := uniqueTopic(t, "ws-acks-never-reads")
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", nil))
	pr := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", nil))
	body := wsclient.Payload(bytes.Repeat([]byte("x"), 64<<10))
	var id any
	for i := 0; i < 300; i++ { // 19 MiB: more than the sockets between proxy and client hold
		wsSend(t, ctx, pr, map[string]any{"payload": body})
		a := wsNext(t, ctx, pr)
		if a["result"] != "ok" {
			t.Fatalf("message %d: %v", i, a)
		}
		id = a["messageId"]
	}
	const sessions = "pulsar_proxy_websocket_sessions"
	wait.Until(t, 2*time.Minute, "the session of the client that acks but never reads to be closed", func() bool {
		if err := c.Send(ctx, map[string]any{"messageId": id}); err != nil {
			t.Logf("the client's ack: %v", err) // the proxy closed the connection
		}
		time.Sleep(300 * time.Millisecond)
		return p.metric(t, sessions, `endpoint="consumer"`) == 0
	})
}

// TestWebSocketKeepAlive: with websocket.pingInterval the proxy pings each client. A client
// that answers (its library answers pings while it reads) keeps a quiet session open past
// websocket.sessionIdleTimeout; the session of one that does not read is closed once the
// timeout passes (1001 and the connection dropped: what the client then reads first is its
// failed answer to a ping, so the proxy's session count is what shows it).
func TestWebSocketKeepAlive(t *testing.T) {
	// Each ping waits up to an interval for its pong: four chances per idle timeout, however
	// loaded the machine.
	p, base := wsProxy(t, "  sessionIdleTimeout: 4s\n  pingInterval: 1s\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := uniqueTopic(t, "ws-keepalive")
	live := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "live", nil))
	deaf := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "deaf", nil))
	defer deaf.CloseNow()
	if m, err := live.NextWithin(10 * time.Second); m != nil || err != nil {
		t.Fatalf("a client answering pings, for two and a half idle timeouts: %v, %v; want its session open and quiet", m, err)
	}
	// live's read stays pending and goes on answering pings.
	const sessions = "pulsar_proxy_websocket_sessions"
	wait.Until(t, 30*time.Second, "the session of the client that answers no ping to be closed", func() bool {
		return p.metric(t, sessions, `endpoint="consumer"`) == 1
	})
	if m, err := live.NextWithin(time.Second); m != nil || err != nil {
		t.Fatalf("the client answering pings, after the other's session closed: %v, %v; want its session open", m, err)
	}
}

// TestWebSocketSurvivesUnloadAndRestart: a producer and a consumer of the WebSocket API go
// on across two unloads of their topic and a restart of the broker that owns it (the topic
// moves to the other broker while it is down, and back to it once it is up), as a Pulsar
// client's do: every message acknowledged as stored is received.
func TestWebSocketSurvivesUnloadAndRestart(t *testing.T) {
	_, base := wsProxy(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	topic := uniqueTopic(t, "ws-unload")
	const owner = 2
	if err := theRig.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := theRig.PlaceTopic(ctx, topic, owner); err != nil {
		t.Fatal(err)
	}
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", nil))
	pr := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", nil))
	steps := []func(){
		func() { unloadTopic(t, topic) },
		func() { unloadTopic(t, topic) },
		func() { stopBrokerForTest(t, ctx, owner) },
		func() {
			if err := theRig.StartBroker(ctx, owner); err != nil {
				t.Fatal(err)
			}
			if err := theRig.PlaceTopic(ctx, topic, owner); err != nil {
				t.Fatal(err)
			}
		},
	}
	const per = 15
	n := per * (len(steps) + 1)
	for i := 0; i < n; i++ {
		if i > 0 && i%per == 0 {
			steps[i/per-1]()
		}
		wsSend(t, ctx, pr, wsPayload(fmt.Sprint("u", i)))
		// Across a step the proxy brings the producer back with backoff, as Pulsar's
		// clients do: up to 30 s between two attempts, more than wsNext waits.
		if a := wsNextWithin(t, ctx, pr, 2*time.Minute); a["result"] != "ok" {
			t.Fatalf("message %d: %v", i, a)
		}
	}
	seen := map[string]bool{}
	for len(seen) < n {
		m := wsNextWithin(t, ctx, c, 2*time.Minute)
		seen[string(wsclient.Decoded(m))] = true
		wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	}
}

// stopBrokerForTest stops broker n (SIGTERM) and starts it again when the test ends if the
// test did not, so the package's next test has both.
func stopBrokerForTest(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	if err := theRig.StopBroker(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ids, err := theRig.ListBrokers(context.Background()); err == nil && slices.Contains(ids, theRig.BrokerID(n)) {
			return
		}
		if err := theRig.StartBroker(context.Background(), n); err != nil {
			t.Errorf("restarting broker %d: %v", n, err)
		}
	})
}
