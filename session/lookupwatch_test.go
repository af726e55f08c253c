package session

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/discovery"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/fakebroker"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// watchBroker is a stand-in broker for topic-list watchers: it offers them in CONNECTED,
// answers WATCH_TOPIC_LIST with its list and at once an update (so the update races the
// answer through the proxy), and records what it is asked.
type watchBroker struct {
	*fakebroker.Broker
	topics []string
	silent bool // WATCH_TOPIC_LIST goes unanswered

	mu      sync.Mutex
	watches map[uint64]*pb.CommandWatchTopicList // by the watcher id it was given
	closed  []uint64                             // watcher ids closed
}

func newWatchBroker(t *testing.T, topics ...string) *watchBroker {
	b := &watchBroker{topics: topics, watches: map[uint64]*pb.CommandWatchTopicList{}}
	b.Broker = fakebroker.Start(t, b.handle)
	return b
}

func (b *watchBroker) handle(c net.Conn, cmd *pb.BaseCommand) {
	var out []*pb.BaseCommand
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		connected := frame.Connected("fake", 21, 5<<20)
		connected.Connected.FeatureFlags = &pb.FeatureFlags{SupportsTopicWatchers: proto.Bool(true)}
		out = append(out, connected)
	case pb.BaseCommand_PING:
		out = append(out, frame.Pong())
	case pb.BaseCommand_WATCH_TOPIC_LIST:
		w := cmd.GetWatchTopicList()
		b.mu.Lock()
		b.watches[w.GetWatcherId()] = w
		b.mu.Unlock()
		if !b.silent {
			out = append(out, &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS.Enum(), WatchTopicListSuccess: &pb.CommandWatchTopicListSuccess{
				RequestId: w.RequestId, WatcherId: w.WatcherId, Topic: b.topics, TopicsHash: proto.String(edge.TopicsHash(b.topics))}},
				b.update(w.GetWatcherId(), w.GetNamespace()+"/early"))
		}
	case pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
		w := cmd.GetWatchTopicListClose()
		b.mu.Lock()
		b.closed = append(b.closed, w.GetWatcherId())
		b.mu.Unlock()
		out = append(out, &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: w.RequestId}})
	}
	for _, o := range out {
		frame.WriteCommand(c, o)
	}
}

func (b *watchBroker) update(watcher uint64, topic string) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_UPDATE.Enum(), WatchTopicUpdate: &pb.CommandWatchTopicUpdate{
		WatcherId: proto.Uint64(watcher), NewTopics: []string{"persistent://" + topic}, TopicsHash: proto.String("broker-hash")}}
}

// send writes cmd on every connection (the pool has one).
func (b *watchBroker) send(t *testing.T, cmd *pb.BaseCommand) {
	t.Helper()
	for _, c := range b.Conns() {
		if err := frame.WriteCommand(c, cmd); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor waits (bounded) until cond holds on the broker's records.
func (b *watchBroker) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, 5*time.Second, "the broker to see "+what, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return cond()
	})
}

// watchResolver is the resolver and control connections of a proxy in front of b. The
// Control has no connection yet: the first CONNECTED makes one to learn whether the broker
// offers watchers.
func watchResolver(t *testing.T, b *watchBroker) *lookup.Resolver {
	t.Helper()
	static, err := discovery.NewStatic([]string{"pulsar://" + b.Addr})
	if err != nil {
		t.Fatal(err)
	}
	control := upstream.NewControl(upstream.ControlConfig{Connector: testConfig().Upstream, MaxPending: 10, ConnsPerBroker: 1, Logger: zerolog.Nop()})
	t.Cleanup(control.Close)
	return lookup.NewResolver(brokers.NewSet(static, brokers.Options{}), control, 5*time.Second, 3, false, nil)
}

func watchCmd(requestID, watcherID uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: &pb.CommandWatchTopicList{
		RequestId: proto.Uint64(requestID), WatcherId: proto.Uint64(watcherID), Namespace: proto.String("public/default"),
		TopicsPattern: proto.String("persistent://public/default/.*"), TopicsHash: proto.String("client-hash")}}
}

// A lookup-mode client's watcher is opened by the proxy on its pooled broker connection:
// two clients using the same watcher id share that connection under distinct ids, each gets
// its own answers and updates under its own ids, in the broker's order, and a watcher is
// closed on the broker when its client closes it or goes away.
func TestLookupModeTopicListWatchers(t *testing.T) {
	b := newWatchBroker(t, "persistent://public/default/a")
	addr, m := startProxy(t, testConfig(), watchResolver(t, b), noTargets{})

	clients := []*peer{dialPeer(t, addr), dialPeer(t, addr)}
	for _, p := range clients {
		p.send(connectCmd(nil))
		if !p.recv().GetConnected().GetFeatureFlags().GetSupportsTopicWatchers() {
			t.Fatal("the lookup connection's CONNECTED does not offer topic-list watchers though the broker does")
		}
		p.send(watchCmd(10, 1))
	}
	var brokerIDs []uint64
	for i, p := range clients {
		ok := p.recv().GetWatchTopicListSuccess()
		if ok.GetRequestId() != 10 || ok.GetWatcherId() != 1 || len(ok.Topic) != 1 {
			t.Fatalf("client %d: answer %v", i, ok)
		}
		early := p.recv().GetWatchTopicUpdate() // the update that raced the answer comes after it
		if early.GetWatcherId() != 1 || len(early.NewTopics) != 1 {
			t.Fatalf("client %d: first update %v", i, early)
		}
	}
	b.waitFor(t, "two watchers", func() bool { return len(b.watches) == 2 })
	for id, w := range b.watches {
		brokerIDs = append(brokerIDs, id)
		if w.TopicsHash != nil {
			t.Errorf("the client's topics hash reached the broker: %q", w.GetTopicsHash())
		}
	}
	if brokerIDs[0] == brokerIDs[1] {
		t.Fatalf("both clients' watchers have id %d on the shared broker connection", brokerIDs[0])
	}
	waitCounter(t, m.watchers, 2)

	// Each update goes to the one client whose watcher it names, under that client's id.
	b.send(t, b.update(brokerIDs[0], "public/default/for-0"))
	b.send(t, b.update(brokerIDs[1], "public/default/for-1"))
	var got, other *peer
	for _, p := range clients {
		u := p.recv().GetWatchTopicUpdate()
		if u.GetWatcherId() != 1 || len(u.NewTopics) != 1 {
			t.Fatalf("update %v", u)
		}
		if u.NewTopics[0] == "persistent://public/default/for-0" {
			if got != nil {
				t.Fatal("both clients got the first watcher's update")
			}
			got = p
		} else {
			other = p
		}
	}
	if got == nil || other == nil {
		t.Fatal("the updates did not go one to each client")
	}
	first := brokerIDs[0]

	// The client that got it closes its watcher: the broker closes that one.
	got.send(&pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(), WatchTopicListClose: &pb.CommandWatchTopicListClose{
		RequestId: proto.Uint64(11), WatcherId: proto.Uint64(1)}})
	if s := got.recv().GetSuccess(); s.GetRequestId() != 11 {
		t.Fatalf("close answered with %v", s)
	}
	b.waitFor(t, "the first watcher closed", func() bool { return len(b.closed) == 1 && b.closed[0] == first })

	// The other client goes away: the proxy closes its watcher on the broker.
	other.c.Close()
	b.waitFor(t, "the second watcher closed", func() bool { return len(b.closed) == 2 })
	waitCounter(t, m.watchers, 0)
}

// A broker connection that drops takes its watchers with it, and no command tells a client
// so: the client's connection is closed, so that it opens its watchers again.
func TestLookupModeWatcherLostWithBrokerConnection(t *testing.T) {
	b := newWatchBroker(t)
	addr, m := startProxy(t, testConfig(), watchResolver(t, b), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv()
	p.send(watchCmd(3, 7))
	if ok := p.recv().GetWatchTopicListSuccess(); ok.GetWatcherId() != 7 {
		t.Fatalf("answer %v", ok)
	}
	p.recv() // the early update
	b.DropConnections()
	p.expectClosed()
	waitCounter(t, m.watchers, 0)
}

// With a policy, a watcher's topics are those the role may look up, and each list's hash is
// that of what the client holds.
func TestLookupModeWatcherTopicsFiltered(t *testing.T) {
	b := newWatchBroker(t, "persistent://public/default/open-1", "persistent://public/default/secret")
	sec, _ := testSecurity(t, "anon", `
rules:
  - roles: [anon]
    resources: ["public/default/open-*", "public/default/early"]
    actions: [lookup]
`)
	sec.ForwardClientCredentials = false
	addr, _ := startSecureProxy(t, sec, watchResolver(t, b), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv()
	p.send(watchCmd(3, 7))
	ok := p.recv().GetWatchTopicListSuccess()
	if len(ok.Topic) != 1 || ok.Topic[0] != "persistent://public/default/open-1" || ok.GetTopicsHash() != edge.TopicsHash(ok.Topic) {
		t.Fatalf("filtered answer %v", ok)
	}
	p.recv() // the early update (public/default/early is visible)
	var id uint64
	b.waitFor(t, "the watcher", func() bool {
		for k := range b.watches {
			id = k
		}
		return len(b.watches) == 1
	})
	b.send(t, b.update(id, "public/default/secret-2")) // hidden: nothing reaches the client
	b.send(t, b.update(id, "public/default/open-2"))
	u := p.recv().GetWatchTopicUpdate()
	want := []string{"persistent://public/default/early", "persistent://public/default/open-1", "persistent://public/default/open-2"}
	if len(u.NewTopics) != 1 || u.NewTopics[0] != want[2] || u.GetTopicsHash() != edge.TopicsHash(want) {
		t.Fatalf("filtered update %v", u)
	}
}

// A broker connection that drops while a watcher opens fails that WATCH_TOPIC_LIST (the
// client may try again), as a lookup failing the same way does; the client's connection stays.
func TestLookupModeWatcherOpeningWhenBrokerDrops(t *testing.T) {
	b := newWatchBroker(t)
	b.silent = true
	addr, _ := startProxy(t, testConfig(), watchResolver(t, b), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv()
	p.send(watchCmd(3, 7))
	b.waitFor(t, "the watcher", func() bool { return len(b.watches) == 1 })
	b.DropConnections()
	p.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	cmd, err := p.r.ReadCommand()
	if err != nil {
		t.Fatalf("expected an ERROR answering WATCH_TOPIC_LIST request 3; the proxy closed the client connection instead: %v", err)
	}
	if e := cmd.GetError(); e.GetRequestId() != 3 || e.GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("WATCH_TOPIC_LIST answered with %v", cmd)
	}
	p.send(frame.Ping())
	if got := p.recv().GetType(); got != pb.BaseCommand_PONG {
		t.Fatalf("the connection did not go on: %v", got)
	}
}

// A request without the sub-message of its type decodes (BaseCommand has them all optional):
// it is refused, and the connection goes on.
func TestLookupModeRequestWithoutItsCommand(t *testing.T) {
	b := newWatchBroker(t, "persistent://public/default/a")
	addr, _ := startProxy(t, testConfig(), watchResolver(t, b), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv()
	for _, typ := range []pb.BaseCommand_Type{pb.BaseCommand_WATCH_TOPIC_LIST, pb.BaseCommand_LOOKUP, pb.BaseCommand_PARTITIONED_METADATA,
		pb.BaseCommand_GET_TOPICS_OF_NAMESPACE, pb.BaseCommand_GET_SCHEMA} {
		p.send(&pb.BaseCommand{Type: typ.Enum()})
		if e := p.recv().GetError(); e.GetError() != pb.ServerError_MetadataError {
			t.Fatalf("%v without its command answered with %v", typ, e)
		}
	}
	p.send(watchCmd(1, 1))
	if ok := p.recv().GetWatchTopicListSuccess(); ok.GetRequestId() != 1 {
		t.Fatalf("a whole WATCH_TOPIC_LIST afterwards: %v", ok)
	}
}

// With forwarded client credentials the proxy neither offers nor opens lookup-mode watchers:
// the pooled connection carrying a client's credentials is retired when they expire.
func TestLookupModeWatchersNotWithForwardedCredentials(t *testing.T) {
	b := newWatchBroker(t, "persistent://public/default/a")
	sec, _ := testSecurity(t, "", "") // ForwardClientCredentials on
	addr, _ := startSecureProxy(t, sec, watchResolver(t, b), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(withToken(token(t, testSecret, "alice", time.Hour))))
	if c := p.recv().GetConnected(); c == nil || c.GetFeatureFlags().GetSupportsTopicWatchers() {
		t.Fatalf("CONNECTED %v", c)
	}
	p.send(watchCmd(3, 7))
	if e := p.recv().GetError(); e.GetRequestId() != 3 || e.GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("WATCH_TOPIC_LIST answered with %v", e)
	}
}
