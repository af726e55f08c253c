package lookup

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseBrokerURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		addr    string
		tls     bool
		wantErr string
	}{
		{in: "pulsar://127.0.0.1:6650", addr: "127.0.0.1:6650"},
		{in: "pulsar+ssl://Broker-0.Pulsar.svc:6651", addr: "broker-0.pulsar.svc:6651", tls: true},
		{in: "pulsar://[::1]:6650", addr: "[::1]:6650"},
		{in: "http://127.0.0.1:8080", wantErr: "scheme"},
		{in: "pulsar://127.0.0.1", wantErr: "host and port"},
		{in: "pulsar://127.0.0.1:6650/admin", wantErr: "only scheme://host:port"},
		{in: "pulsar://u:p@127.0.0.1:6650", wantErr: "only scheme://host:port"},
	} {
		b, err := parseBrokerURL(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || b.Addr() != tc.addr || b.TLS != tc.tls {
			t.Errorf("%s: got %+v %v", tc.in, b, err)
		}
	}
}

func TestAllowOnlyKnownBrokers(t *testing.T) {
	static, err := NewStatic([]string{"pulsar://127.0.0.1:6650", "pulsar://broker-1.pulsar:6651"})
	if err != nil {
		t.Fatal(err)
	}
	set := NewBrokerSet(static, SetOptions{})
	for target, ok := range map[string]bool{
		"127.0.0.1:6650":               true,
		"pulsar://127.0.0.1:6650":      true,
		"BROKER-1.pulsar:6651":         true,
		"127.0.0.1:6651":               false, // known host, other port
		"127.0.0.1:22":                 false,
		"127.0.0.1:8080":               false,
		"localhost:6650":               false, // same machine, but not as discovery names it
		"broker-1.pulsar:6651/x":       false,
		"evil.example:6650":            false,
		"":                             false,
		"pulsar://127.0.0.1:6650/path": false,
		// Other spellings of a known host:port are not it.
		"127.0.0.1:06650":           false,
		"127.0.0.1:+6650":           false,
		"[127.0.0.1]:6650":          false,
		"broker-1.pulsar.:6651":     false,
		"pulsar://[127.0.0.1]:6650": false,
	} {
		_, err := set.Allow(target)
		if ok != (err == nil) {
			t.Errorf("Allow(%q) err = %v, want allowed=%v", target, err, ok)
		}
		if err != nil && !errors.Is(err, ErrTargetNotAllowed) {
			t.Errorf("Allow(%q) err = %v, want ErrTargetNotAllowed", target, err)
		}
	}
}

// ParseTarget takes only a DNS name or an IP literal on a plain decimal port, whatever
// discovery or the patterns would say of it.
func TestParseTargetSyntax(t *testing.T) {
	for target, want := range map[string]string{
		"broker-0.pulsar.svc:6650":           "broker-0.pulsar.svc:6650",
		"[fd00::1]:6651":                     "[fd00::1]:6651",
		"pulsar+ssl://B0:6651":               "b0:6651",
		"b0:06650":                           "",
		"b0:65536":                           "",
		"b0:0":                               "",
		"b0.:6650":                           "",
		"b..0:6650":                          "",
		"b_0:6650":                           "",
		"-b0:6650":                           "",
		"b0 :6650":                           "",
		"b0%2e:6650":                         "",
		"fd00::1:6650":                       "",
		"[b0]:6650":                          "",
		"[fe80::1%25eth0]:6650":              "",
		"127.1:6650":                         "",
		strings.Repeat("a", 64) + ":6650":    "",
		strings.Repeat("a.", 127) + "a:6650": "",
	} {
		host, port, err := ParseTarget(target)
		got := ""
		if err == nil {
			got = Broker{Host: host, Port: port}.Addr()
		}
		if got != want {
			t.Errorf("ParseTarget(%q) = %q (%v), want %q", target, got, err, want)
		}
	}
}

// fakeBroker answers CONNECT, PING and LOOKUP over real sockets. answer decides each
// lookup's response. Unit-test stand-in; the real proof is the end-to-end suite.
func fakeBroker(t *testing.T, answer func(*pb.CommandLookupTopic, string) *pb.CommandLookupTopicResponse) (Broker, *atomic.Int32) {
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
	b, _ := parseBrokerURL(self)
	return b, &lookups
}

func testPool() *upstream.Pool {
	return upstream.NewPool(upstream.PoolConfig{Connector: &upstream.Connector{Dialer: &upstream.Dialer{Timeout: time.Second},
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
	static, _ := NewStatic([]string{other.URL})
	pool := testPool()
	defer pool.Close()
	r := NewResolver(NewBrokerSet(static, SetOptions{LearnedTTL: time.Minute}), pool, 5*time.Second, 3, false, nil)
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
	static, _ := NewStatic([]string{loop.URL})
	pool := testPool()
	defer pool.Close()
	r := NewResolver(NewBrokerSet(static, SetOptions{}), pool, 5*time.Second, 3, false, nil)
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
	static, _ := NewStatic([]string{deadURL, live.URL})
	set := NewBrokerSet(static, SetOptions{})
	pool := testPool()
	defer pool.Close()
	r := NewResolver(set, pool, 5*time.Second, 3, false, nil)
	for i := range 4 { // round robin starts on each broker at least once
		resp, err := r.Resolve(context.Background(), upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String("persistent://public/default/t"), RequestId: proto.Uint64(uint64(i))}})
		if err != nil || resp.GetLookupTopicResponse().GetBrokerServiceUrl() != live.URL {
			t.Fatalf("lookup %d: %v %v", i, resp, err)
		}
	}
	set.probeAll(context.Background(), ownPing(pool), time.Second)
	if ok, reason := set.Ready(); !ok {
		t.Fatalf("set not ready with one live broker: %s", reason)
	}
	only, _ := NewStatic([]string{deadURL})
	deadSet := NewBrokerSet(only, SetOptions{})
	deadSet.probeAll(context.Background(), ownPing(pool), time.Second)
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
	pool := testPool()
	defer pool.Close()
	for _, tc := range []struct {
		name string
		set  func() *BrokerSet
		want string
	}{{
		name: "port not allowed",
		set: func() *BrokerSet {
			static, _ := NewStatic([]string{entry.URL})
			return NewBrokerSet(static, SetOptions{AllowedPorts: []string{entry.Port}, LearnedTTL: time.Minute})
		},
		want: "is not an allowed broker port",
	}, {
		name: "dropped by discovery",
		set: func() *BrokerSet {
			d := &listDiscovery{}
			d.set(t, entry.URL, owner.URL)
			set := NewBrokerSet(d, SetOptions{LearnedTTL: time.Minute, Logger: zerolog.Nop()})
			set.Brokers()
			d.set(t, entry.URL)
			return set
		},
		want: "is not a known broker",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewResolver(tc.set(), pool, 5*time.Second, 3, false, nil)
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
	pool := testPool() // plaintext underneath: what is tested is which URL is followed
	defer pool.Close()
	lookupTopic := func(r *Resolver, topic string) (*pb.CommandLookupTopicResponse, error) {
		resp, err := r.Resolve(context.Background(), upstream.Client{}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(topic), RequestId: proto.Uint64(1)}})
		return resp.GetLookupTopicResponse(), err
	}

	static, _ := NewStatic([]string{entry.URL})
	overTLS := NewResolver(NewBrokerSet(static, SetOptions{LearnedTTL: time.Minute}), pool, 5*time.Second, 3, true, nil)
	lr, err := lookupTopic(overTLS, "persistent://public/default/t")
	if err != nil {
		t.Fatal(err)
	}
	if lr.GetBrokerServiceUrl() != "pulsar://"+owner.Addr() || lr.GetBrokerServiceUrlTls() != "pulsar+ssl://"+owner.Addr() {
		t.Fatalf("over TLS: answer names %q and %q, want the owner's TLS endpoint %s twice", lr.GetBrokerServiceUrl(), lr.GetBrokerServiceUrlTls(), owner.Addr())
	}
	ownerOnly, _ := NewStatic([]string{owner.URL})
	_, err = lookupTopic(NewResolver(NewBrokerSet(ownerOnly, SetOptions{}), pool, 5*time.Second, 3, true, nil), "persistent://public/default/plain-only")
	var le *Error
	if !errors.As(err, &le) || le.Code != pb.ServerError_ServiceNotReady || !strings.Contains(le.Message, "no brokerServiceUrlTls") {
		t.Fatalf("broker without a TLS URL: err = %v", err)
	}

	plain := NewResolver(NewBrokerSet(ownerOnly, SetOptions{}), pool, 5*time.Second, 3, false, nil)
	lr, err = lookupTopic(plain, "persistent://public/default/plain-only")
	if err != nil {
		t.Fatal(err)
	}
	if lr.GetBrokerServiceUrl() != owner.URL || lr.GetBrokerServiceUrlTls() != "pulsar+ssl://"+owner.Addr() {
		t.Fatalf("plaintext: answer names %q and %q, want %s twice", lr.GetBrokerServiceUrl(), lr.GetBrokerServiceUrlTls(), owner.Addr())
	}
}

// ownPing is the pool's Ping of its own connections, the health checks' prober.
func ownPing(p *upstream.Pool) Prober {
	return func(ctx context.Context, addr string) error { return p.Ping(ctx, addr, upstream.Client{}) }
}
