package e2eauth

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The per-role limits of the policy file with pulsar-client-go against the real brokers:
// dave, carol and bob are limited, alice is not and keeps working while they are held back.
const limitsPolicy = `
rules:
  - {roles: ["*"], resources: ["acme/*/*"], actions: [lookup, produce, consume]}
limits:
  - {roles: [dave], maxConnections: 2}
  - {roles: [carol], lookupsPerSecond: 1, lookupBurst: 1}
  - {roles: [bob], publishBytesPerSecond: 200000}
`

// A client of dave's holds his two connections (the lookup one and one to the broker); a
// second client of his is refused ServiceNotReady, and alice is unaffected.
func TestRoleConnectionLimitWithRealClients(t *testing.T) {
	p := startProxy(t, limitsPolicy, "")
	topic := uniqueTopic(nsShared, "limits")
	first := tokenClient(t, p.PulsarURL, "dave")
	prod, err := first.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("dave's first client: %v", err)
	}
	defer prod.Close()
	second := clientWithTimeout(t, p.PulsarURL, pulsar.NewAuthenticationToken(mustToken("dave", 0)), 5*time.Second)
	if _, err := second.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
		t.Fatal("dave's second client got a producer beyond his connection limit")
	} else {
		t.Logf("dave's second client refused: %v", err)
	}
	if got := p.count(t, "pulsar_proxy_limited_total", `limit="role_connections"`); got < 1 {
		t.Fatalf("role connection refusals = %v", got)
	}
	produceConsume(t, tokenClient(t, p.PulsarURL, "alice"), uniqueTopic(nsShared, "alice"), 100)
}

// Over her lookup rate carol's lookups are answered TooManyRequests: her client is refused
// or slowed; alice's lookups at the same time all succeed.
func TestRoleLookupRateWithRealClients(t *testing.T) {
	p := startProxy(t, limitsPolicy, "")
	carol := clientWithTimeout(t, p.PulsarURL, pulsar.NewAuthenticationToken(mustToken("carol", 0)), 10*time.Second)
	alice := tokenClient(t, p.PulsarURL, "alice")
	var wg sync.WaitGroup
	var carolErrs []error
	var mu sync.Mutex
	began := time.Now()
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			prod, err := carol.CreateProducer(pulsar.ProducerOptions{Topic: uniqueTopic(nsShared, fmt.Sprint("carol-", i))})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				carolErrs = append(carolErrs, err)
				return
			}
			prod.Close()
		}()
		go func() {
			defer wg.Done()
			prod, err := alice.CreateProducer(pulsar.ProducerOptions{Topic: uniqueTopic(nsShared, fmt.Sprint("alice-", i))})
			if err != nil {
				t.Errorf("alice's producer %d: %v", i, err)
				return
			}
			prod.Close()
		}()
	}
	wg.Wait()
	took := time.Since(began)
	refused := 0
	for _, err := range carolErrs {
		if !strings.Contains(err.Error(), "TooManyRequests") && !strings.Contains(err.Error(), "lookup rate") {
			t.Errorf("carol's producer failed otherwise than by her lookup rate: %v", err)
		}
		refused++
	}
	// Four producers need eight lookups (partition metadata, then the lookup); at one a second
	// carol is either refused some or made to wait for them.
	if refused == 0 && took < 3*time.Second {
		t.Fatalf("carol made four producers in %v with no refusal: her lookup rate was not applied", took)
	}
	if got := p.count(t, "pulsar_proxy_limited_total", `limit="role_lookup_rate"`); got < 1 {
		t.Fatalf("lookup rate refusals = %v", got)
	}
	t.Logf("carol: %d of 4 producers refused, %v in all", refused, took)
}

// Bob's publishing is paced at 200 KB/s: the proxy stops reading from him, his sends slow
// down, and every message arrives; alice publishing at the same time is not paced.
func TestRolePublishRateWithRealClients(t *testing.T) {
	p := startProxy(t, limitsPolicy, "")
	payload := make([]byte, 10_000)
	publish := func(role string, n int) {
		t.Helper()
		c := clientWithTimeout(t, p.PulsarURL, pulsar.NewAuthenticationToken(mustToken(role, 0)), time.Minute)
		topic := uniqueTopic(nsShared, role+"-rate")
		cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for i := range n {
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload, Key: fmt.Sprint(i)}); err != nil {
				t.Errorf("%s's send %d: %v", role, i, err)
				return
			}
		}
		for i := range n {
			m, err := cons.Receive(ctx)
			if err != nil || m.Key() != fmt.Sprint(i) {
				t.Errorf("%s's message %d: %v %v", role, i, m, err)
				return
			}
			cons.Ack(m)
		}
	}
	before := p.count(t, "pulsar_proxy_publish_paused_seconds_total")
	publish("alice", 100)
	if paused := p.count(t, "pulsar_proxy_publish_paused_seconds_total") - before; paused > 0 {
		t.Fatalf("alice, who has no publish limit, was paused %.2f s", paused)
	}
	// 1 MB at 200 KB/s after a burst of 200 KB takes at least 4 s, however fast the machine;
	// the pauses make up what the sends themselves did not take (on a slow machine, less).
	began := time.Now()
	publish("bob", 100)
	took := time.Since(began)
	paused := p.count(t, "pulsar_proxy_publish_paused_seconds_total") - before
	if took < 4*time.Second || paused <= 0 {
		t.Fatalf("bob's 1 MB at 200 KB/s took %v with %.2f s of pauses, want at least 4 s, paced by the proxy", took, paused)
	}
	t.Logf("bob's 1 MB at 200 KB/s took %v, %.2f s of it paused by the proxy", took.Round(10*time.Millisecond), paused)
}
