package e2eauth

import (
	"bufio"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// A Java pattern consumer through the proxy picks up a topic created after it subscribed,
// within seconds, although it polls for new topics only once an hour: only the topic-list
// watcher (WATCH_TOPIC_LIST, which the proxy forwards in direct mode and whose updates it
// filters by the policy) can explain it. The proxy's metrics show the watcher.
func TestPatternConsumerWatcherThroughProxy(t *testing.T) {
	p := startProxy(t, allowAll, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prog, err := rig.CompileJava(ctx, filepath.Join("testdata", "PatternProbe.java"), t.TempDir())
	rig.Need(t, "the Java client", err)

	prefix := strings.TrimPrefix(uniqueTopic(nsShared, "watch"), "persistent://")
	// One topic exists before, so the namespace's list has something of the pattern's.
	produceOne(t, p.PulsarURL, "persistent://"+prefix+"-before", "before")
	cmd := prog.Command(ctx, p.PulsarURL, mustToken("alice", 0), "persistent://"+prefix+"-.*")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	waitLine(t, lines, "subscribed")
	// The watcher is opened right after the subscription; the proxy counts it.
	deadline := time.Now().Add(30 * time.Second)
	for p.metric(t, "pulsar_proxy_topic_list_watchers") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the proxy shows no topic-list watcher")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The "before" message may arrive first; what matters is the topic created now.
	created := time.Now()
	produceOne(t, p.PulsarURL, "persistent://"+prefix+"-after", "after")
	waitLine(t, lines, "received after ")
	t.Logf("the new topic's message arrived %v after the topic was created (polling every hour)", time.Since(created).Round(time.Millisecond))
}

// produceOne sends one message with key to topic through the proxy (creating the topic).
func produceOne(t *testing.T, url, topic, key string) {
	t.Helper()
	c := tokenClient(t, url, "alice")
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.Send(ctxT(t, time.Minute), &pulsar.ProducerMessage{Key: key, Payload: []byte(key)}); err != nil {
		t.Fatal(err)
	}
}

// waitLine waits (up to two minutes) for a line that starts with prefix, skipping others.
func waitLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the probe ended before saying %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q from the probe in two minutes", prefix)
		}
	}
}
