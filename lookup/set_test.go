package lookup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// listDiscovery is a discovery whose list the test changes.
type listDiscovery struct {
	mu sync.Mutex
	bs []Broker
}

func (d *listDiscovery) set(t *testing.T, urls ...string) {
	t.Helper()
	var bs []Broker
	for _, u := range urls {
		b, err := parseBrokerURL(u)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	d.mu.Lock()
	d.bs = bs
	d.mu.Unlock()
}

func (d *listDiscovery) Brokers() []Broker {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Broker(nil), d.bs...)
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func allowed(set *BrokerSet, target string) bool {
	_, err := set.Allow(target)
	return err == nil
}

func TestAllowedPortsApplyToDiscoveryAndTargets(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650", "pulsar://b1:22", "pulsar://b2:6651")
	set := NewBrokerSet(d, SetOptions{AllowedPorts: []string{"6650", "6651"}, Logger: zerolog.Nop()})
	if got := set.Brokers(); len(got) != 2 || got[0].Addr() != "b0:6650" || got[1].Addr() != "b2:6651" {
		t.Fatalf("live set %v: a broker on port 22 must not be in it", got)
	}
	for target, want := range map[string]bool{"b0:6650": true, "b2:6651": true, "b1:22": false, "b0:6651": false} {
		if allowed(set, target) != want {
			t.Errorf("Allow(%s) = %v, want %v", target, !want, want)
		}
	}
	picked, err := set.pick()
	if err != nil || len(picked) != 2 {
		t.Fatalf("Pick = %v %v", picked, err)
	}
}

func TestLearnedTargetsExpireAndDiscoveryRemovalWins(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	d := &listDiscovery{}
	d.set(t, "pulsar://10.0.0.1:6650", "pulsar://10.0.0.2:6650")
	set := NewBrokerSet(d, SetOptions{AllowedPorts: []string{"6650"}, LearnedTTL: time.Minute, Now: clock.Now, Logger: zerolog.Nop()})

	// A broker advertises a pod name that discovery lists as an IP.
	if allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("unknown name allowed before any lookup named it")
	}
	set.learn("pulsar://broker-0.broker.pulsar.svc:6650")
	set.learn("pulsar://broker-0.broker.pulsar.svc:8080") // port not allowed: never learned
	if !allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("name from a lookup answer not allowed")
	}
	if allowed(set, "broker-0.broker.pulsar.svc:8080") {
		t.Fatal("learned a URL on a port that is not allowed")
	}
	clock.add(59 * time.Second)
	set.learn("pulsar://broker-0.broker.pulsar.svc:6650") // a new answer renews it
	clock.add(59 * time.Second)
	if !allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("renewed entry expired early")
	}
	clock.add(2 * time.Second)
	if allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("learned entry outlived its TTL")
	}

	// Discovery drops 10.0.0.2: refused at once, and a stale lookup answer naming it does
	// not bring it back within the TTL.
	set.Brokers()
	d.set(t, "pulsar://10.0.0.1:6650")
	if allowed(set, "10.0.0.2:6650") {
		t.Fatal("broker dropped by discovery still allowed")
	}
	set.learn("pulsar://10.0.0.2:6650")
	if allowed(set, "10.0.0.2:6650") {
		t.Fatal("a lookup answer re-admitted a broker discovery just dropped")
	}
	clock.add(61 * time.Second)
	set.learn("pulsar://10.0.0.2:6650")
	if !allowed(set, "10.0.0.2:6650") {
		t.Fatal("after the TTL a lookup answer should be trusted again")
	}
	// Discovery brings it back: allowed as a live broker again.
	d.set(t, "pulsar://10.0.0.1:6650", "pulsar://10.0.0.2:6650")
	if !allowed(set, "10.0.0.2:6650") {
		t.Fatal("re-registered broker refused")
	}
}

func TestLearnedTableIsBounded(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650")
	set := NewBrokerSet(d, SetOptions{LearnedTTL: time.Hour, Logger: zerolog.Nop()})
	for i := range maxLearned + 100 {
		set.learn(fmt.Sprintf("pulsar://h%d:6650", i))
	}
	set.mu.Lock()
	n := len(set.learned)
	set.mu.Unlock()
	if n > maxLearned {
		t.Fatalf("learned table grew to %d, bound is %d", n, maxLearned)
	}
}

func TestAllowedHostsPatterns(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650")
	set := NewBrokerSet(d, SetOptions{AllowedPorts: []string{"6650"}, AllowedHosts: []string{"*.broker.pulsar.svc", "pulsar-broker-*", "10.1.0.*"},
		Logger: zerolog.Nop()})
	for target, want := range map[string]bool{
		"broker-7.broker.pulsar.svc:6650":            true,
		"BROKER-7.Broker.Pulsar.svc:6650":            true,
		"broker-7.broker.pulsar.svc:22":              false,
		"evil.example:6650":                          false,
		"a.b.broker.pulsar.svc.evil:6650":            false,
		"a.b.broker.pulsar.svc:6650":                 false, // '*' is one label
		"pulsar-broker-1:6650":                       true,
		"pulsar-broker-1.evil.example:6650":          false, // '*' never crosses a dot
		"pulsar-broker-1.:6650":                      false,
		"pulsar-broker-1/x:6650":                     false,
		"pulsar-broker-1:06650":                      false,
		"pulsar://pulsar-broker-1.evil.example:6650": false,
		"10.1.0.9:6650":                              true,
		"10.1.0.9.evil.example:6650":                 false,
		"[::1]:6650":                                 false,
	} {
		if allowed(set, target) != want {
			t.Errorf("Allow(%s) = %v, want %v", target, !want, want)
		}
	}
}

func TestChangedFiresWhenTheSetChanges(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650")
	set := NewBrokerSet(d, SetOptions{Logger: zerolog.Nop()})
	set.Brokers()
	ch := set.Changed()
	set.Brokers()
	select {
	case <-ch:
		t.Fatal("Changed fired without a change")
	default:
	}
	d.set(t, "pulsar://b0:6650", "pulsar://b1:6650")
	set.Brokers()
	select {
	case <-ch:
	default:
		t.Fatal("Changed did not fire after a new broker appeared")
	}
}

func TestUnionMergesAndReportsProblems(t *testing.T) {
	a := &listDiscovery{}
	a.set(t, "pulsar://b0:6650", "pulsar://b1:6650")
	m := NewMetrics(nil)
	src := newSource("consul", zerolog.Nop(), m)
	src.fail(errors.New("connection refused"))
	b, _ := parseBrokerURL("pulsar://b1:6650")
	u := Union{a, src}
	src.succeed([]Broker{b})
	if got := u.Brokers(); len(got) != 2 {
		t.Fatalf("union %v, want b0 and b1 once", got)
	}
	src.fail(errors.New("connection refused"))
	if p := u.problem(); !strings.Contains(p, "consul: connection refused") {
		t.Fatalf("problem %q", p)
	}
	empty := NewBrokerSet(Union{newSource("dns", zerolog.Nop(), m)}, SetOptions{})
	if ok, reason := empty.Ready(); ok || !strings.Contains(reason, "dns: no answer yet") {
		t.Fatalf("ready=%v reason=%q", ok, reason)
	}
	if _, err := empty.pick(); !errors.Is(err, errNoBroker) {
		t.Fatalf("Pick on empty set: %v", err)
	}
}

func TestSourceKeepsLastGoodListOnErrorsAndEmptyAnswers(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	src := newSource("consul", zerolog.Nop(), m)
	src.now = clock.Now
	b0, _ := parseBrokerURL("pulsar://b0:6650")
	src.succeed([]Broker{b0})
	if src.isStale() || testutil.ToFloat64(m.discoveryStale.WithLabelValues("consul")) != 0 {
		t.Fatal("fresh source reported stale")
	}
	clock.add(time.Hour)
	if s := src.staleness(); s != 0 {
		t.Fatalf("staleness %v while the last refresh succeeded", s)
	}
	src.confirm() // a Consul watch that held until now: the list was current until now
	clock.add(10 * time.Second)
	src.fail(errors.New("consul down"))
	src.succeed(nil) // an empty answer is not believed either
	if got := src.Brokers(); len(got) != 1 || got[0] != b0 {
		t.Fatalf("last good list lost: %v", got)
	}
	if !src.isStale() || testutil.ToFloat64(m.discoveryStale.WithLabelValues("consul")) != 1 {
		t.Fatal("failed source not marked stale")
	}
	if n := testutil.ToFloat64(m.discoveryErrors.WithLabelValues("consul")); n != 2 {
		t.Fatalf("errors = %v, want 2", n)
	}
	clock.add(5 * time.Second)
	if s := src.staleness(); s != 15*time.Second {
		t.Fatalf("staleness %v, want 15s", s)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pulsar_proxy_discovery_staleness_seconds Seconds a provider's broker list has not been known to be current: 0 while its last refresh succeeded, else the time since the last success (since start before the first).
# TYPE pulsar_proxy_discovery_staleness_seconds gauge
pulsar_proxy_discovery_staleness_seconds{provider="consul"} 15
# HELP pulsar_proxy_discovery_last_success_timestamp_seconds Unix time of a provider's last successful refresh (a Consul watch counts until it breaks); 0 before the first.
# TYPE pulsar_proxy_discovery_last_success_timestamp_seconds gauge
pulsar_proxy_discovery_last_success_timestamp_seconds{provider="consul"} 1.0036e+06
`), "pulsar_proxy_discovery_staleness_seconds", "pulsar_proxy_discovery_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
}

func TestResolverCoalescesIdenticalLookups(t *testing.T) {
	release := make(chan struct{})
	b, lookups := fakeBroker(t, func(l *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		if strings.HasSuffix(l.GetTopic(), "/held") {
			<-release
		}
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String(self), Authoritative: proto.Bool(true),
			Message: proto.String(l.GetTopic())} // tells whose answer a caller got
	})
	static, _ := NewStatic([]string{b.URL})
	pool := testPool()
	defer pool.Close()
	m := NewMetrics(nil)
	r := NewResolver(NewBrokerSet(static, SetOptions{}), pool, 5*time.Second, 3, false, m)
	lookup := func(ctx context.Context, topic string, id uint64, authoritative bool) (*pb.BaseCommand, error) {
		return r.Resolve(ctx, upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(topic), RequestId: proto.Uint64(id), Authoritative: proto.Bool(authoritative)}})
	}

	const n = 200
	const topic = "persistent://public/default/held"
	var started, done sync.WaitGroup
	errs := make(chan error, n+1)
	// The first caller gives up at once; the flight must go on for the others.
	cancelled, cancel := context.WithCancel(context.Background())
	started.Add(1)
	done.Add(1)
	go func() {
		defer done.Done()
		started.Done()
		if _, err := lookup(cancelled, topic, 0, false); !errors.Is(err, context.Canceled) {
			errs <- errors.New("cancelled caller did not see its cancellation")
		}
	}()
	started.Wait()
	wait.Until(t, 10*time.Second, "the cancelled caller's lookup to reach the broker", func() bool { return lookups.Load() != 0 })
	cancel()
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			resp, err := lookup(context.Background(), topic, uint64(i+1), false)
			if err != nil {
				errs <- err
				return
			}
			if got := resp.GetLookupTopicResponse().GetMessage(); got != topic {
				errs <- errors.New("wrong answer " + got)
			}
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := lookups.Load(); got > 3 {
		t.Errorf("%d identical lookups reached the broker %d times, want at most a handful", n+1, got)
	}
	if c := testutil.ToFloat64(m.coalesced.WithLabelValues("LOOKUP")); c < n-2 {
		t.Errorf("coalesced = %v, want about %d", c, n)
	}
	if sent := testutil.ToFloat64(m.brokerRequests.WithLabelValues("LOOKUP", b.Addr())); sent != float64(lookups.Load()) {
		t.Errorf("broker request metric %v, broker saw %d", sent, lookups.Load())
	}

	// Different authoritative flags and different topics are never merged.
	before := lookups.Load()
	for i, tc := range []struct {
		topic string
		auth  bool
	}{{"persistent://public/default/a", false}, {"persistent://public/default/a", true}, {"persistent://public/default/b", false}} {
		resp, err := lookup(context.Background(), tc.topic, uint64(1000+i), tc.auth)
		if err != nil || resp.GetLookupTopicResponse().GetMessage() != tc.topic {
			t.Fatalf("%v: %v %v", tc, resp, err)
		}
	}
	if got := lookups.Load() - before; got != 3 {
		t.Fatalf("3 distinct lookups reached the broker %d times", got)
	}
}

func TestCoalesceKeySeparatesPrincipals(t *testing.T) {
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("t"), RequestId: proto.Uint64(1)}}
	a, _ := coalesceKey(upstream.Client{Principal: "alice"}, cmd)
	b, _ := coalesceKey(upstream.Client{Principal: "bob"}, cmd)
	if a == b {
		t.Fatal("two principals share a coalescing key")
	}
	if _, ok := coalesceKey(upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA.Enum()}); ok {
		t.Fatal("GET_SCHEMA must not be coalesced")
	}
}

func TestResolverLearnsOwnersFromLookupAnswers(t *testing.T) {
	const advertised = "pulsar://broker-0.broker.pulsar.svc:6650"
	b, _ := fakeBroker(t, func(l *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		if strings.HasSuffix(l.GetTopic(), "/failed") {
			return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Failed.Enum(),
				BrokerServiceUrl: proto.String("pulsar://evil.example:6650"), Error: pb.ServerError_ServiceNotReady.Enum()}
		}
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String(advertised), Authoritative: proto.Bool(true)}
	})
	static, _ := NewStatic([]string{b.URL})
	set := NewBrokerSet(static, SetOptions{LearnedTTL: time.Minute, Logger: zerolog.Nop()})
	pool := testPool()
	defer pool.Close()
	r := NewResolver(set, pool, 5*time.Second, 3, false, nil)
	if allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("allowed before any lookup named it")
	}
	for i, topic := range []string{"persistent://public/default/failed", "persistent://public/default/t"} {
		if _, err := r.Resolve(context.Background(), upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(topic), RequestId: proto.Uint64(uint64(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if !allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("owner named in a lookup answer not allowed")
	}
	if allowed(set, "evil.example:6650") {
		t.Fatal("a URL in a Failed answer was learned")
	}
}

// Finding 6: a waiting caller must never get an answer computed for another caller's flags
// (a reader's do-not-create request must not share a creating one's answer).
func TestCoalesceKeyCoversEveryRequestField(t *testing.T) {
	alice := upstream.Client{Principal: "alice"}
	pm := func(create bool) *pb.BaseCommand {
		return &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
			Topic: proto.String("t"), RequestId: proto.Uint64(1), MetadataAutoCreationEnabled: proto.Bool(create)}}
	}
	lk := func(props ...string) *pb.BaseCommand {
		l := &pb.CommandLookupTopic{Topic: proto.String("t"), RequestId: proto.Uint64(2)}
		for _, p := range props {
			l.Properties = append(l.Properties, &pb.KeyValue{Key: proto.String(p), Value: proto.String("v")})
		}
		return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: l}
	}
	for _, pair := range [][2]*pb.BaseCommand{{pm(true), pm(false)}, {lk(), lk("a")}, {lk("a"), lk("b")}} {
		a, _ := coalesceKey(alice, pair[0])
		b, _ := coalesceKey(alice, pair[1])
		if a == b {
			t.Fatalf("%v and %v share a coalescing key", pair[0], pair[1])
		}
	}
	// The request id alone does not separate requests.
	x, y := pm(true), pm(true)
	y.PartitionMetadata.RequestId = proto.Uint64(77)
	if a, _ := coalesceKey(alice, x); a != func() string { b, _ := coalesceKey(alice, y); return b }() {
		t.Fatal("request ids separate otherwise equal requests")
	}
}
