package e2eauth

import (
	"bufio"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// A Java pattern consumer through the proxy picks up a topic created after it subscribed,
// within seconds, although it polls for new topics only once an hour: only the topic-list
// watcher (WATCH_TOPIC_LIST, which the proxy forwards in direct mode and whose updates it
// filters by the policy) can explain it. The proxy's metrics show the watcher.
func TestPatternConsumerWatcherThroughProxy(t *testing.T) {
	p := startProxy(t, allowAll, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prog, err := rig.CompileJava(ctx, filepath.Join("testdata", "PatternProbe.java"))
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
	wait.Until(t, 30*time.Second, "the proxy to show a topic-list watcher", func() bool {
		return p.metric(t, "pulsar_proxy_topic_list_watchers") >= 1
	})
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

// A topic-list watcher opened on a lookup connection (the proxy offers watchers in its own
// CONNECTED when the brokers do) is opened by the proxy on the brokers as the client's role:
// the client learns of a topic created after it subscribed from the broker's update, under
// its own watcher id, with the topics its role may not look up filtered out, and closing it
// closes it on the broker. In front of the brokers that trust original_principal: with
// forwarded client credentials (the auth rig's) the proxy offers no such watchers.
func TestLookupConnectionWatchesTopicList(t *testing.T) {
	trust := trustingRig(t)
	saved := proxyproc.Env
	proxyproc.Env = append(slices.Clone(saved), "PULSAR_PROXY_AUTH_FORWARD_CLIENT_CREDENTIALS=false")
	t.Cleanup(func() { proxyproc.Env = saved })
	prefix := strings.TrimPrefix(uniqueTopic(nsShared, "lw"), "persistent://")
	p := startProxyOn(t, trust, `
rules:
  - roles: [carol]
    resources: ["`+prefix+`-a*"]
    actions: [lookup]
  - roles: [alice]
    resources: ["`+prefix+`-*"]
    actions: [lookup, produce]
`, "")
	c, r, resp := rawConnect(t, p.Addr, "token", []byte(mustToken("carol", 0)))
	if !resp.GetConnected().GetFeatureFlags().GetSupportsTopicWatchers() {
		t.Fatalf("the lookup connection's CONNECTED does not offer topic-list watchers: %v", resp)
	}
	send := func(cmd *pb.BaseCommand) {
		if err := frame.WriteCommand(c, cmd); err != nil {
			t.Fatal(err)
		}
	}
	send(&pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: &pb.CommandWatchTopicList{
		RequestId: proto.Uint64(1), WatcherId: proto.Uint64(77), Namespace: proto.String(nsShared),
		TopicsPattern: proto.String("persistent://" + prefix + "-.*")}})
	ok := readCmd(t, r)
	if s := ok.GetWatchTopicListSuccess(); s == nil || s.GetRequestId() != 1 || s.GetWatcherId() != 77 || len(s.Topic) != 0 {
		t.Fatalf("WATCH_TOPIC_LIST answered with %v", ok)
	}
	if n := p.metric(t, "pulsar_proxy_topic_list_watchers"); n != 1 {
		t.Fatalf("the proxy counts %v topic-list watchers, want 1", n)
	}

	// A topic carol may not look up is created first: had its update not been filtered, it
	// would be the first to arrive.
	produceOne(t, p.PulsarURL, "persistent://"+prefix+"-b1", "hidden")
	created := time.Now()
	produceOne(t, p.PulsarURL, "persistent://"+prefix+"-a1", "visible")
	u := readCmd(t, r)
	if w := u.GetWatchTopicUpdate(); w == nil || w.GetWatcherId() != 77 || len(w.NewTopics) != 1 ||
		w.NewTopics[0] != "persistent://"+prefix+"-a1" || len(w.DeletedTopics) != 0 {
		t.Fatalf("first update %v", u)
	}
	t.Logf("the update for the new topic arrived %v after it was created", time.Since(created).Round(time.Millisecond))

	send(&pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(), WatchTopicListClose: &pb.CommandWatchTopicListClose{
		RequestId: proto.Uint64(2), WatcherId: proto.Uint64(77)}})
	if s := readCmd(t, r); s.GetSuccess().GetRequestId() != 2 {
		t.Fatalf("WATCH_TOPIC_LIST_CLOSE answered with %v", s)
	}
	if n := p.metric(t, "pulsar_proxy_topic_list_watchers"); n != 0 {
		t.Fatalf("the proxy counts %v topic-list watchers after the close, want 0", n)
	}
}
