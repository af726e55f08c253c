// Command demo is `make demo`: it brings up a real two-broker Pulsar cluster (the test rig),
// starts pulsar-proxy in front of it, produces and consumes through the proxy with
// pulsar-client-go, and prints what happened.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

const (
	partitions = 4
	messages   = 2000
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()

	step("starting the rig: two Pulsar brokers (and Consul) on loopback")
	began := time.Now()
	r, err := rig.Start(ctx)
	if err != nil {
		return err
	}
	if r.Owned() {
		defer func() {
			step("stopping the rig")
			r.Stop()
		}()
	}
	for _, b := range r.Brokers {
		fmt.Printf("   broker %d  %s  (admin %s)\n", b.N, b.URL, b.HTTP)
	}
	fmt.Printf("   ready in %s\n", time.Since(began).Round(time.Second))

	step("building and starting pulsar-proxy")
	dir, err := os.MkdirTemp("", "pulsar-proxy-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := proxyproc.Build(dir)
	if err != nil {
		return err
	}
	var brokers []string
	for _, b := range r.Brokers {
		brokers = append(brokers, b.URL)
	}
	proxy, err := proxyproc.Start(bin, dir, brokers, "log:\n  level: info\n  sessionSummary: info\n")
	if err != nil {
		return err
	}
	defer proxy.Stop()
	fmt.Printf("   proxy     %s  (metrics %s/metrics)\n", proxy.PulsarURL, proxy.HTTPURL)

	step(fmt.Sprintf("creating a %d-partition topic whose partitions live on both brokers", partitions))
	topic, owners, err := r.CreateSpreadPartitionedTopic(ctx, "demo", partitions)
	if err != nil {
		return err
	}
	fmt.Printf("   topic     %s\n", topic)

	step(fmt.Sprintf("producing and consuming %d messages through the proxy (service URL %s)", messages, proxy.PulsarURL))
	perPartition, err := produceAndConsume(ctx, proxy.PulsarURL, topic)
	if err != nil {
		return err
	}

	step("what happened")
	fmt.Printf("   %-12s %-26s %s\n", "partition", "owning broker", "messages consumed")
	total := 0
	for i, o := range owners {
		fmt.Printf("   %-12d %-26s %d\n", i, fmt.Sprintf("broker %d (%s)", o.N, strings.TrimPrefix(o.URL, "pulsar://")), perPartition[i])
		total += perPartition[i]
	}
	fmt.Printf("   consumed %d of %d messages, every payload identical to what was sent\n", total, messages)
	scrape, err := metrics.Fetch(proxy.HTTPURL + "/metrics")
	if err != nil {
		return err
	}
	var missing error
	body := func(name string, labels ...string) float64 {
		v, err := scrape.Value(name, labels...)
		if err != nil && missing == nil {
			missing = err
		}
		return v
	}
	fmt.Printf("   proxy: %v lookups answered, direct sessions per broker:", body("pulsar_proxy_lookups_total"))
	for _, b := range r.Brokers {
		addr := strings.TrimPrefix(b.URL, "pulsar://")
		fmt.Printf(" %s=%v", addr, body("pulsar_proxy_broker_sessions_total", fmt.Sprintf("broker=%q", addr)))
	}
	fmt.Printf("\n   proxy: %v bytes client→broker, %v bytes broker→client (forwarded socket to socket)\n",
		body("pulsar_proxy_bytes_total", `direction="client_to_broker"`), body("pulsar_proxy_bytes_total", `direction="broker_to_client"`))
	if total != messages {
		return fmt.Errorf("consumed %d messages, want %d", total, messages)
	}
	return missing
}

func produceAndConsume(ctx context.Context, serviceURL, topic string) (map[int]int, error) {
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: serviceURL, OperationTimeout: time.Minute, Logger: plog.DefaultNopLogger()})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "demo",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	defer consumer.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return nil, fmt.Errorf("create producer: %w", err)
	}
	defer producer.Close()

	sent := map[string]bool{}
	for i := range messages {
		payload := fmt.Sprintf("message %04d via pulsar-proxy", i)
		sent[payload] = true
		producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(payload), Key: fmt.Sprint(i)}, nil)
	}
	if err := producer.Flush(); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	perPartition := map[int]int{}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for got := 0; got < messages; got++ {
		msg, err := consumer.Receive(rctx)
		if err != nil {
			return nil, fmt.Errorf("receive after %d: %w", got, err)
		}
		consumer.Ack(msg)
		if !sent[string(msg.Payload())] {
			return nil, fmt.Errorf("received a message that was not sent: %q", msg.Payload())
		}
		delete(sent, string(msg.Payload()))
		perPartition[int(msg.ID().PartitionIdx())]++
	}
	if len(sent) != 0 {
		keys := make([]string, 0, len(sent))
		for k := range sent {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("%d messages missing, e.g. %q", len(sent), keys[0])
	}
	return perPartition, nil
}

func step(s string) { fmt.Printf("\n== %s\n", s) }
