package e2e

// HTTP-lookup clients through the proxy (routed sessions, docs/routed-sessions.md) against
// the real brokers. The peer suite (test/peer) proves the same with no broker reachable from
// the clients; this test proves a topic that moves under a routed producer.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestRoutedHTTPLookupClientFollowsAnUnload: pulsar-client-go with the proxy's HTTP URL as its
// service URL produces over partitions owned by both brokers while one partition is moved to
// the other broker mid-stream (its bundle unloaded there); the client comes back through the
// proxy, whose routed session looks its producer and consumer up again and finds the new
// owner (routed lookups "moved"), every send succeeds and every message arrives. The client never took the
// binary-lookup path (no direct session) and never got a broker's address (its connections
// are all the proxy's routed sessions).
func TestRoutedHTTPLookupClientFollowsAnUnload(t *testing.T) {
	proxy := startAdminProxy(t, "")
	topic, owners := partitionedTopicOnBothBrokers(t, "routed", 4)
	c := newClient(t, proxy.HTTPURL)
	consumer := subscribe(t, c, topic, "s", pulsar.Shared)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 400
	movedBefore := proxy.metric(t, "pulsar_proxy_routed_lookups_total", `result="moved"`)
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for i := range n {
		if i == n/2 {
			if err := theRig.PlaceTopic(testCtx(t), topic+"-partition-0", 3-owners[0]); err != nil {
				t.Fatalf("moving partition 0 to broker %d: %v", 3-owners[0], err)
			}
		}
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("send %d: %v", i, err))
				mu.Unlock()
			}
		})
		if i%10 == 0 {
			time.Sleep(5 * time.Millisecond) // keep sending across the unload
		}
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d sends failed across the unload, first: %s", len(failures), n, failures[0])
	}
	receiveAll(t, consumer, n)
	if moved := proxy.metric(t, "pulsar_proxy_routed_lookups_total", `result="moved"`); moved <= movedBefore {
		t.Errorf("no routed lookup found partition 0 at its new owner (moved lookups: %v before, %v after)", movedBefore, moved)
	}
	if d := proxy.metric(t, "pulsar_proxy_sessions_total", `mode="direct"`); d != 0 {
		t.Errorf("%v direct sessions: the HTTP-lookup client took the binary-lookup path", d)
	}
	if r := proxy.metric(t, "pulsar_proxy_sessions_total", `mode="routed"`); r < 1 {
		t.Errorf("no routed session (owners %v)", owners)
	}
}

// receiveAll receives and acknowledges n distinct messages.
func receiveAll(t *testing.T, consumer pulsar.Consumer, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	for len(seen) < n {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("%d of %d acknowledged messages never arrived: %v", n-len(seen), n, err)
		}
		consumer.Ack(msg)
		seen[string(msg.Payload())] = true
	}
}
