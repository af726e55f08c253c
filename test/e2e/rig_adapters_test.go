package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

func init() {
	beforeAll("build pulsar-proxy", func(dir string) (err error) {
		proxyBinary, err = proxyproc.Build(dir)
		return err
	})
}

func brokerURLs() []string {
	var out []string
	for _, b := range theRig.Brokers {
		out = append(out, b.URL)
	}
	return out
}

// brokerAddrs are the brokers' host:port as the proxy's metrics label them.
func brokerAddrs() []string {
	var out []string
	for _, u := range brokerURLs() {
		out = append(out, strings.TrimPrefix(u, "pulsar://"))
	}
	return out
}

func brokerHTTPURLs() []string {
	var out []string
	for _, b := range theRig.Brokers {
		out = append(out, b.HTTP)
	}
	return out
}

func uniqueTopic(t *testing.T, prefix string) string { return rig.UniqueTopic(t, prefix) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func unloadTopic(t *testing.T, topic string) {
	t.Helper()
	if err := theRig.UnloadTopic(testCtx(t), topic); err != nil {
		t.Fatalf("unload %s: %v", topic, err)
	}
}

// partitionedTopicOnBothBrokers creates a partitioned topic whose partitions are owned by
// both brokers and returns it with each partition's owner (broker number).
func partitionedTopicOnBothBrokers(t *testing.T, prefix string, partitions int) (string, []int) {
	t.Helper()
	topic, owners, err := theRig.CreateSpreadPartitionedTopic(testCtx(t), prefix, partitions)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, o := range owners {
		nums = append(nums, o.N)
	}
	return topic, nums
}

// broker2Down is true between stopBroker2 and startBroker2; the other tests share the rig,
// so a test that stops broker 2 always gets it back, even when it fails half-way.
var broker2Down bool

func stopBroker2(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	broker2Down = true
	t.Cleanup(func() {
		if broker2Down {
			startBroker2(t)
		}
	})
	if err := theRig.StopBroker(ctx, 2); err != nil {
		t.Fatalf("stop broker 2: %v", err)
	}
}

func startBroker2(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := theRig.StartBroker(ctx, 2); err != nil {
		t.Fatalf("start broker 2: %v", err)
	}
	broker2Down = false
}
