package lookup

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/discovery"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBroker answers CONNECT, PING and LOOKUP over real sockets. answer decides each
// lookup's response. Unit-test stand-in; the real proof is the end-to-end suite.
func fakeBroker(t *testing.T, answer func(*pb.CommandLookupTopic, string) *pb.CommandLookupTopicResponse) (brokers.Broker, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var lookups atomic.Int32
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	self := "pulsar://" + ln.Addr().String()
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				<-done
				c.Close()
			}()
			go func() {
				defer c.Close()
				r := frame.NewReader(c, frame.DefaultMaxFrameSize)
				for {
					f, err := r.ReadFrame()
					if err != nil {
						return
					}
					cmd, _ := frame.Decode(f.Command)
					var resp *pb.BaseCommand
					switch cmd.GetType() {
					case pb.BaseCommand_CONNECT:
						resp = frame.Connected("fake", 21, 5<<20)
					case pb.BaseCommand_PING:
						resp = frame.Pong()
					case pb.BaseCommand_LOOKUP:
						lookups.Add(1)
						lr := answer(cmd.GetLookupTopic(), self)
						lr.RequestId = cmd.GetLookupTopic().RequestId
						resp = &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: lr}
					default:
						continue
					}
					frame.WriteCommand(c, resp)
				}
			}()
		}
	}()
	b, _ := brokers.ParseURL(self)
	return b, &lookups
}

func testControl() *upstream.Control {
	return upstream.NewControl(upstream.ControlConfig{Connector: &upstream.Connector{Dialer: &upstream.Dialer{Timeout: time.Second},
		Version: "test", ProtocolVersion: 21, Timeout: time.Second, MaxFrameSize: frame.DefaultMaxFrameSize},
		MaxPending: 10, Logger: zerolog.Nop()})
}

func TestResolverFollowsRedirects(t *testing.T) {
	owner, ownerLookups := fakeBroker(t, func(l *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		if !l.GetAuthoritative() {
			t.Errorf("redirected lookup lost the authoritative flag")
		}
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String(self), Authoritative: proto.Bool(true)}
	})
	other, _ := fakeBroker(t, func(l *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Redirect.Enum(),
			BrokerServiceUrl: proto.String(owner.URL), Authoritative: proto.Bool(true)}
	})
	static, _ := discovery.NewStatic([]string{other.URL})
	control := testControl()
	defer control.Close()
	r := NewResolver(brokers.NewSet(static, brokers.Options{LearnedTTL: time.Minute}), control, 5*time.Second, 3, false, nil)
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://public/default/t"), RequestId: proto.Uint64(7)}}
	resp, err := r.Resolve(context.Background(), upstream.Client{}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	lr := resp.GetLookupTopicResponse()
	if lr.GetResponse() != pb.CommandLookupTopicResponse_Connect || lr.GetBrokerServiceUrl() != owner.URL || ownerLookups.Load() != 1 {
		t.Fatalf("got %v (owner asked %d times)", lr, ownerLookups.Load())
	}
}

func TestResolverBoundsRedirects(t *testing.T) {
	loop, lookups := fakeBroker(t, func(_ *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Redirect.Enum(), BrokerServiceUrl: proto.String(self)}
	})
	static, _ := discovery.NewStatic([]string{loop.URL})
	control := testControl()
	defer control.Close()
	r := NewResolver(brokers.NewSet(static, brokers.Options{}), control, 5*time.Second, 3, false, nil)
	_, err := r.Resolve(context.Background(), upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://public/default/t"), RequestId: proto.Uint64(1)}})
	var le *Error
	if !errors.As(err, &le) || le.Code != pb.ServerError_ServiceNotReady || !strings.Contains(le.Message, "redirected more than 3") {
		t.Fatalf("err = %v", err)
	}
	if lookups.Load() != 4 {
		t.Fatalf("broker asked %d times, want 4 (first try and 3 redirects)", lookups.Load())
	}
}

func TestResolverSkipsDeadBroker(t *testing.T) {
	live, _ := fakeBroker(t, func(_ *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String(self)}
	})
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "pulsar://" + dead.Addr().String()
	dead.Close()
	static, _ := discovery.NewStatic([]string{deadURL, live.URL})
	set := brokers.NewSet(static, brokers.Options{})
	control := testControl()
	defer control.Close()
	r := NewResolver(set, control, 5*time.Second, 3, false, nil)
	for i := range 4 { // round robin starts on each broker at least once
		resp, err := r.Resolve(context.Background(), upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String("persistent://public/default/t"), RequestId: proto.Uint64(uint64(i))}})
		if err != nil || resp.GetLookupTopicResponse().GetBrokerServiceUrl() != live.URL {
			t.Fatalf("lookup %d: %v %v", i, resp, err)
		}
	}
	set.ProbeAll(context.Background(), ownPing(control), time.Second)
	if ok, reason := set.Ready(); !ok {
		t.Fatalf("set not ready with one live broker: %s", reason)
	}
	only, _ := discovery.NewStatic([]string{deadURL})
	deadSet := brokers.NewSet(only, brokers.Options{})
	deadSet.ProbeAll(context.Background(), ownPing(control), time.Second)
	if ok, reason := deadSet.Ready(); ok || !strings.Contains(reason, deadURL) {
		t.Fatalf("dead-only set ready=%v reason=%q", ok, reason)
	}
}

// A redirect target is dialled by the proxy itself, so it must pass the target rule: a broker
// naming one on a port broker.allowedPorts does not allow, or one discovery just dropped, gets
// the client ServiceNotReady and is never dialled.
func TestResolverChecksRedirectTargets(t *testing.T) {
	owner, ownerLookups := fakeBroker(t, func(_ *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String(self)}
	})
	entry, _ := fakeBroker(t, func(*pb.CommandLookupTopic, string) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Redirect.Enum(), BrokerServiceUrl: proto.String(owner.URL)}
	})
	control := testControl()
	defer control.Close()
	for _, tc := range []struct {
		name string
		set  func() *brokers.Set
		want string
	}{{
		name: "port not allowed",
		set: func() *brokers.Set {
			static, _ := discovery.NewStatic([]string{entry.URL})
			return brokers.NewSet(static, brokers.Options{AllowedPorts: []string{entry.Port}, LearnedTTL: time.Minute})
		},
		want: "is not an allowed broker port",
	}, {
		name: "dropped by discovery",
		set: func() *brokers.Set {
			d := &listDiscovery{}
			d.set(t, entry.URL, owner.URL)
			set := brokers.NewSet(d, brokers.Options{LearnedTTL: time.Minute, Logger: zerolog.Nop()})
			set.Brokers()
			d.set(t, entry.URL)
			return set
		},
		want: "is not a known broker",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewResolver(tc.set(), control, 5*time.Second, 3, false, nil)
			resp, err := r.Resolve(context.Background(), upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
				Topic: proto.String("persistent://public/default/t"), RequestId: proto.Uint64(1)}})
			var le *Error
			if !errors.As(err, &le) || le.Code != pb.ServerError_ServiceNotReady ||
				!strings.Contains(le.Message, "redirected to "+owner.URL) || !strings.Contains(le.Message, tc.want) {
				t.Fatalf("got %v, err = %v; want ServiceNotReady naming %s and %q", resp, err, owner.URL, tc.want)
			}
			if n := ownerLookups.Load(); n != 0 {
				t.Fatalf("the redirect target was asked %d times", n)
			}
		})
	}
}

// An answer's two URLs both name the endpoint the proxy dials: the plaintext one normally,
// the TLS one (followed on redirect) when brokers are reached over TLS; a broker without a
// TLS URL is reported, not dialled in plaintext.
func TestResolverPinsTheDialledEndpoint(t *testing.T) {
	owner, _ := fakeBroker(t, func(l *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		addr := strings.TrimPrefix(self, "pulsar://")
		if strings.HasSuffix(l.GetTopic(), "/plain-only") {
			return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String(self)}
		}
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String("pulsar://127.0.0.1:1"), BrokerServiceUrlTls: proto.String("pulsar+ssl://" + addr)}
	})
	// The entry broker redirects by its TLS URL only; its plaintext URL leads nowhere.
	entry, _ := fakeBroker(t, func(l *pb.CommandLookupTopic, self string) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Redirect.Enum(),
			BrokerServiceUrl: proto.String("pulsar://127.0.0.1:1"), BrokerServiceUrlTls: proto.String("pulsar+ssl://" + owner.Addr())}
	})
	control := testControl() // plaintext underneath: what is tested is which URL is followed
	defer control.Close()
	lookupTopic := func(r *Resolver, topic string) (*pb.CommandLookupTopicResponse, error) {
		resp, err := r.Resolve(context.Background(), upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(topic), RequestId: proto.Uint64(1)}})
		return resp.GetLookupTopicResponse(), err
	}

	static, _ := discovery.NewStatic([]string{entry.URL})
	overTLS := NewResolver(brokers.NewSet(static, brokers.Options{LearnedTTL: time.Minute}), control, 5*time.Second, 3, true, nil)
	lr, err := lookupTopic(overTLS, "persistent://public/default/t")
	if err != nil {
		t.Fatal(err)
	}
	if lr.GetBrokerServiceUrl() != "pulsar://"+owner.Addr() || lr.GetBrokerServiceUrlTls() != "pulsar+ssl://"+owner.Addr() {
		t.Fatalf("over TLS: answer names %q and %q, want the owner's TLS endpoint %s twice", lr.GetBrokerServiceUrl(), lr.GetBrokerServiceUrlTls(), owner.Addr())
	}
	ownerOnly, _ := discovery.NewStatic([]string{owner.URL})
	_, err = lookupTopic(NewResolver(brokers.NewSet(ownerOnly, brokers.Options{}), control, 5*time.Second, 3, true, nil), "persistent://public/default/plain-only")
	var le *Error
	if !errors.As(err, &le) || le.Code != pb.ServerError_ServiceNotReady || !strings.Contains(le.Message, "no brokerServiceUrlTls") {
		t.Fatalf("broker without a TLS URL: err = %v", err)
	}

	plain := NewResolver(brokers.NewSet(ownerOnly, brokers.Options{}), control, 5*time.Second, 3, false, nil)
	lr, err = lookupTopic(plain, "persistent://public/default/plain-only")
	if err != nil {
		t.Fatal(err)
	}
	if lr.GetBrokerServiceUrl() != owner.URL || lr.GetBrokerServiceUrlTls() != "pulsar+ssl://"+owner.Addr() {
		t.Fatalf("plaintext: answer names %q and %q, want %s twice", lr.GetBrokerServiceUrl(), lr.GetBrokerServiceUrlTls(), owner.Addr())
	}
}

// ownPing is the Control's Ping of its own connections, the health checks' prober.
func ownPing(p *upstream.Control) brokers.Prober {
	return func(ctx context.Context, addr string) error { return p.Ping(ctx, addr, upstream.Client{}) }
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
	static, _ := discovery.NewStatic([]string{b.URL})
	control := testControl()
	defer control.Close()
	m := NewMetrics(nil)
	r := NewResolver(brokers.NewSet(static, brokers.Options{}), control, 5*time.Second, 3, false, m)
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
	static, _ := discovery.NewStatic([]string{b.URL})
	set := brokers.NewSet(static, brokers.Options{LearnedTTL: time.Minute, Logger: zerolog.Nop()})
	control := testControl()
	defer control.Close()
	r := NewResolver(set, control, 5*time.Second, 3, false, nil)
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

// listDiscovery is a discovery whose list the test changes.
type listDiscovery struct {
	mu sync.Mutex
	bs []brokers.Broker
}

func (d *listDiscovery) set(t *testing.T, urls ...string) {
	t.Helper()
	var bs []brokers.Broker
	for _, u := range urls {
		b, err := brokers.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	d.mu.Lock()
	d.bs = bs
	d.mu.Unlock()
}

func (d *listDiscovery) Brokers() []brokers.Broker {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]brokers.Broker(nil), d.bs...)
}

func allowed(set *brokers.Set, target string) bool {
	_, err := set.Allow(target)
	return err == nil
}
