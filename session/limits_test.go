package session

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/frames"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

const limitsPolicy = `
rules: [{roles: ["*"], resources: ["*/*/*"], actions: [lookup, produce, consume]}]
limits:
  - {roles: [carol], maxConnections: 1, lookupsPerSecond: 1, lookupBurst: 1, publishBytesPerSecond: 100000}
`

func answerLookups() fakeResolver {
	return fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: cmd.GetLookupTopic().RequestId, Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://b:6650")}}, nil
	})
}

func connectAs(t *testing.T, addr, role string) (*peer, *pb.BaseCommand) {
	t.Helper()
	p := dialPeer(t, addr)
	p.send(connectCmd(withToken(token(t, testSecret, role, time.Hour))))
	return p, p.recv()
}

// A role's connections are bounded by its limit; other roles are not.
func TestRoleConnectionLimit(t *testing.T) {
	sec, _ := testSecurity(t, "", limitsPolicy)
	addr, m := startSecureProxy(t, sec, answerLookups(), noTargets{})
	first, got := connectAs(t, addr, "carol")
	if got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("carol's first connection: %v", got)
	}
	second, got := connectAs(t, addr, "carol")
	if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("carol's second connection: %v, want ServiceNotReady", got)
	}
	second.expectClosed()
	for range 3 {
		if _, got := connectAs(t, addr, "alice"); got.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("alice: %v", got)
		}
	}
	waitCounter(t, m.limited.WithLabelValues(limitRoleConnections), 1)
	first.c.Close()
	wait.Until(t, 5*time.Second, "carol's slot to be given back when her connection closed", func() bool {
		p, got := connectAs(t, addr, "carol")
		if got.GetType() != pb.BaseCommand_CONNECTED {
			return false
		}
		p.c.Close()
		return true
	})
}

// Over its lookup rate a role is answered TooManyRequests (clients retry); others are not.
func TestRoleLookupRate(t *testing.T) {
	sec, _ := testSecurity(t, "", limitsPolicy)
	addr, m := startSecureProxy(t, sec, answerLookups(), noTargets{})
	carol, _ := connectAs(t, addr, "carol")
	alice, _ := connectAs(t, addr, "alice")
	carol.send(lookupCmd("persistent://acme/ns/t", 1))
	carol.send(lookupCmd("persistent://acme/ns/t", 2))
	results := map[uint64]pb.CommandLookupTopicResponse_LookupType{}
	for range 2 {
		r := carol.recv().GetLookupTopicResponse()
		results[r.GetRequestId()] = r.GetResponse()
		if r.GetResponse() == pb.CommandLookupTopicResponse_Failed && r.GetError() != pb.ServerError_TooManyRequests {
			t.Fatalf("refused lookup: %v, want TooManyRequests", r)
		}
	}
	if results[1] != pb.CommandLookupTopicResponse_Connect || results[2] != pb.CommandLookupTopicResponse_Failed {
		t.Fatalf("carol's lookups: %v, want the first answered and the second over the rate", results)
	}
	for id := range uint64(5) {
		alice.send(lookupCmd("persistent://acme/ns/t", id))
		if r := alice.recv().GetLookupTopicResponse(); r.GetResponse() != pb.CommandLookupTopicResponse_Connect {
			t.Fatalf("alice's lookup %d: %v", id, r)
		}
	}
	waitCounter(t, m.limited.WithLabelValues(limitRoleLookupRate), 1)
}

// Lookups in flight are bounded for all clients together, from request to answer.
func TestLookupsInFlightBound(t *testing.T) {
	release := make(chan struct{})
	asked := make(chan struct{}, 10)
	cfg := testConfig()
	cfg.MaxLookupsInFlight = 1
	addr, m := startProxy(t, cfg, fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		asked <- struct{}{}
		<-release
		return answerLookups()(cmd)
	}), noTargets{})
	a, b := dialPeer(t, addr), dialPeer(t, addr)
	a.send(connectCmd(nil))
	b.send(connectCmd(nil))
	a.recv()
	b.recv()
	a.send(lookupCmd("persistent://public/default/t", 1))
	<-asked
	if got := testutil.ToFloat64(m.lookupsInFlight); got != 1 {
		t.Fatalf("lookups in flight = %v, want 1", got)
	}
	b.send(lookupCmd("persistent://public/default/t", 2))
	if r := b.recv().GetLookupTopicResponse(); r.GetError() != pb.ServerError_TooManyRequests {
		t.Fatalf("a lookup over the bound: %v, want TooManyRequests", r)
	}
	close(release)
	if r := a.recv().GetLookupTopicResponse(); r.GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("the lookup in flight: %v", r)
	}
	b.send(lookupCmd("persistent://public/default/t", 3))
	if r := b.recv().GetLookupTopicResponse(); r.GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("after the answer the bound is free again: %v", r)
	}
	waitCounter(t, m.limited.WithLabelValues(limitLookupsInFlight), 1)
}

// A role over its publish rate is paced: the proxy stops reading from it, nothing is lost.
func TestRolePublishRate(t *testing.T) {
	b, _, _ := fakeBroker(t)
	sec, _ := testSecurity(t, "", limitsPolicy)
	addr, m := startSecureProxy(t, sec, nil, oneTarget{b})
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) {
		withToken(token(t, testSecret, "carol", time.Hour))(c)
		c.ProxyToBrokerUrl = proto.String(b.Addr())
	}))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: %v", got)
	}
	// 300 KB at 100 KB/s with a burst of 100 KB: about two seconds of pauses.
	var stream []byte
	for i := range 30 {
		stream = append(stream, frames.Send(t, 10_000, uint64(i))...)
	}
	p.c.SetDeadline(time.Now().Add(20 * time.Second))
	go p.c.Write(stream)
	r := frame.NewReader(p.c, frame.DefaultMaxFrameSize)
	for i := range 30 {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
		if cmd, _ := frame.Decode(f.Command); cmd.GetSend().GetSequenceId() != uint64(i) {
			t.Fatalf("echo %d: %v", i, cmd)
		}
	}
	if paused := testutil.ToFloat64(m.publishPaused); paused < 1 {
		t.Fatalf("the session paused %.2f s for 300 KB at 100 KB/s, want about 2 s", paused)
	}
}

// The role's lookup rate holds on a direct session too, framed and multiplexed (it held on
// lookup connections only: a client that sent its lookups on a direct session got 200 of 200
// answered): carol's second lookup within the second is the proxy's TooManyRequests, and the
// broker sees one.
func TestRoleLookupRateInDirectSessions(t *testing.T) {
	for _, multiplexed := range []bool{false, true} {
		answered := make(chan struct{}, 10)
		b, _ := recordingBroker(t, func(raw []byte) *pb.BaseCommand {
			cmd, err := frame.Decode(raw)
			if err != nil || cmd.GetType() != pb.BaseCommand_LOOKUP {
				return nil
			}
			answered <- struct{}{}
			return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
				RequestId: cmd.GetLookupTopic().RequestId, Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://b:6650")}}
		})
		sec, _ := testSecurity(t, "", limitsPolicy)
		cfg := testConfig()
		if multiplexed {
			cfg, _ = muxConfig(t, 1<<20)
		}
		cfg.Upstream.Credentials = func() (string, []byte, error) { return "token", []byte("proxy-token"), nil }
		srv := NewServer(cfg, nil, oneTarget{b}, NewMetrics(prometheus.NewRegistry()), zerolog.Nop())
		srv.SetSecurity(sec)
		addr := serveOn(t, srv, nil)
		p := dialPeer(t, addr)
		p.send(connectCmd(func(c *pb.CommandConnect) {
			withToken(token(t, testSecret, "carol", time.Hour))(c)
			c.ProxyToBrokerUrl = proto.String(b.Addr())
		}))
		if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("multiplexed %v: CONNECT: %v", multiplexed, got)
		}
		limited := 0
		for id := range uint64(5) {
			p.send(lookupCmd("persistent://acme/ns/t", id))
			r := p.recv().GetLookupTopicResponse()
			if r.GetRequestId() != id {
				t.Fatalf("multiplexed %v: lookup %d answered as %v", multiplexed, id, r)
			}
			if r.GetResponse() == pb.CommandLookupTopicResponse_Failed && r.GetError() == pb.ServerError_TooManyRequests {
				limited++
			}
		}
		if limited != 4 || len(answered) != 1 {
			t.Fatalf("multiplexed %v: %d of 5 lookups over the rate, %d reached the broker; want 4 and 1", multiplexed, limited, len(answered))
		}
	}
}
