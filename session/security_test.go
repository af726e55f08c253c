package session

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func token(t *testing.T, key []byte, role string, ttl time.Duration) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": role}
	if ttl != 0 {
		claims["exp"] = time.Now().Add(ttl).Unix()
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type staticPolicy struct{ p *authz.Policy }

func (s staticPolicy) Policy() *authz.Policy { return s.p }

func testSecurity(t testing.TB, anonymous string, policy string) (Security, *promtest.Registry) {
	t.Helper()
	tp, err := authn.NewTokenProvider(authn.TokenConfig{SecretKey: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	reg := promtest.New()
	sec := Security{
		Authenticator:            authn.NewAuthenticator(anonymous, tp),
		Metrics:                  authn.NewMetrics(reg),
		ForwardClientCredentials: true,
		RefreshTimeout:           2 * time.Second,
	}
	ec := edge.Config{Metrics: authz.NewMetrics(reg)}
	if policy != "" {
		p, err := authz.ParsePolicy([]byte(policy))
		if err != nil {
			t.Fatal(err)
		}
		ec.Policy = staticPolicy{p}
	}
	sec.Edge = edge.New(ec)
	return sec, reg
}

// startSecureProxy is startProxy with Security set.
func startSecureProxy(t *testing.T, sec Security, r Resolver, targets Targets) (string, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	cfg := testConfig()
	cfg.Upstream.Credentials = func() (string, []byte, error) { return "token", []byte("proxy-token"), nil }
	srv := NewServer(cfg, r, targets, m, zerolog.Nop())
	srv.SetSecurity(sec)
	return serveOn(t, srv, nil), m
}

func withToken(tok string) func(*pb.CommandConnect) {
	return func(c *pb.CommandConnect) {
		c.AuthMethodName = proto.String("token")
		c.AuthData = []byte(tok)
		c.FeatureFlags = &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)}
	}
}

func TestConnectIsAuthenticated(t *testing.T) {
	sec, am := testSecurity(t, "", "")
	addr, m := startSecureProxy(t, sec, nil, noTargets{})
	other := []byte("another-key-another-key-another-key!")
	for _, tc := range []struct {
		name   string
		mut    func(*pb.CommandConnect)
		reason authn.Reason
		method string
	}{
		{"expired", withToken(token(t, testSecret, "alice", -time.Minute)), authn.ReasonExpired, "token"},
		{"other key", withToken(token(t, other, "alice", time.Hour)), authn.ReasonBadSignature, "token"},
		{"malformed", withToken("not-a-jwt"), authn.ReasonMalformed, "token"},
		{"no credentials", nil, authn.ReasonNoCredentials, "none"},
		{"unknown method", func(c *pb.CommandConnect) { c.AuthMethodName = proto.String("kerberos"); c.AuthData = []byte("x") }, authn.ReasonUnknownMethod, "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := dialPeer(t, addr)
			p.send(connectCmd(tc.mut))
			got := p.recv()
			if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthenticationError {
				t.Fatalf("got %v, want AuthenticationError", got)
			}
			p.expectClosed()
			am.Wait(t, "pulsar_proxy_authentication_failures_total", 1, "method", tc.method, "reason", string(tc.reason))
		})
	}
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonAuthFailed)), 5)

	p := dialPeer(t, addr)
	p.send(connectCmd(withToken(token(t, testSecret, "alice", time.Hour))))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("valid token: got %v", got)
	}
}

func TestAnonymousRole(t *testing.T) {
	sec, _ := testSecurity(t, "guest", "rules: [{roles: [guest], resources: [public/default/*], actions: [lookup]}]")
	addr, _ := startSecureProxy(t, sec, fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: cmd.GetLookupTopic().RequestId, Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://b:6650")}}, nil
	}), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("anonymous: got %v", got)
	}
	p.send(lookupCmd("persistent://public/default/t", 1))
	if got := p.recv().GetLookupTopicResponse(); got.GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("guest lookup: %v", got)
	}
	p.send(lookupCmd("persistent://acme/ns/t", 2))
	if got := p.recv().GetLookupTopicResponse(); got.GetResponse() != pb.CommandLookupTopicResponse_Failed || got.GetError() != pb.ServerError_AuthorizationError || got.GetRequestId() != 2 {
		t.Fatalf("guest lookup outside policy: %v", got)
	}
}

func TestLookupModeAuthorization(t *testing.T) {
	sec, am := testSecurity(t, "", `
rules:
  - {roles: [alice], resources: ["acme/ns/a-*"], actions: [lookup]}
`)
	var asked []string
	addr, _ := startSecureProxy(t, sec, fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		switch cmd.GetType() {
		case pb.BaseCommand_PARTITIONED_METADATA:
			asked = append(asked, cmd.GetPartitionMetadata().GetTopic())
			return &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
				RequestId: cmd.GetPartitionMetadata().RequestId, Partitions: proto.Uint32(0)}}, nil
		default:
			return &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(), GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
				RequestId: cmd.GetGetTopicsOfNamespace().RequestId, TopicsHash: proto.String("h"),
				Topics: []string{"persistent://acme/ns/a-1", "persistent://acme/ns/b-1", "persistent://acme/ns/a-2-partition-0"}}}, nil
		}
	}), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(withToken(token(t, testSecret, "alice", time.Hour))))
	p.recv()
	pm := func(topic string, id uint64) *pb.BaseCommand {
		return &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
			Topic: proto.String(topic), RequestId: proto.Uint64(id)}}
	}
	p.send(pm("persistent://acme/ns/b-1", 5))
	if got := p.recv().GetPartitionMetadataResponse(); got.GetError() != pb.ServerError_AuthorizationError || got.GetRequestId() != 5 {
		t.Fatalf("denied metadata: %v", got)
	}
	p.send(pm("persistent://acme/ns/a-1", 6))
	if got := p.recv().GetPartitionMetadataResponse(); got.GetError() != 0 || got.GetRequestId() != 6 {
		t.Fatalf("allowed metadata: %v", got)
	}
	if len(asked) != 1 || asked[0] != "persistent://acme/ns/a-1" {
		t.Fatalf("broker asked about %v; a denied request must not reach it", asked)
	}
	p.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
		RequestId: proto.Uint64(7), Namespace: proto.String("acme/ns")}})
	got := p.recv().GetGetTopicsOfNamespaceResponse()
	if len(got.Topics) != 2 || got.Topics[0] != "persistent://acme/ns/a-1" || got.Topics[1] != "persistent://acme/ns/a-2-partition-0" ||
		got.GetTopicsHash() != "e65e1da3" { // Pulsar's TopicList.calculateHash of the kept two
		t.Fatalf("filtered topics: %v", got)
	}
	am.Wait(t, "pulsar_proxy_authorization_denials_total", 1, "action", string(authz.ActionLookup))
}

func TestDirectModeIdentityAndPolicy(t *testing.T) {
	b, connects, _ := fakeBroker(t)
	sec, am := testSecurity(t, "", `
rules:
  - {roles: [alice], resources: ["public/default/*"], actions: [lookup, produce]}
`)
	addr, _ := startSecureProxy(t, sec, nil, oneTarget{b})
	tok := token(t, testSecret, "alice", time.Hour)
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) { withToken(tok)(c); c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v", got)
	}
	bc := <-connects
	if bc.GetAuthMethodName() != "token" || string(bc.GetAuthData()) != "proxy-token" || bc.GetOriginalPrincipal() != "alice" ||
		bc.GetOriginalAuthMethod() != "token" || bc.GetOriginalAuthData() != tok {
		t.Fatalf("broker CONNECT = %v", bc)
	}
	producer := func(topic string, id uint64) *pb.BaseCommand {
		return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
			Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)}}
	}
	// The echoing broker sends back what reached it.
	p.send(producer("persistent://public/default/t", 1))
	if got := p.recv(); got.GetType() != pb.BaseCommand_PRODUCER || got.GetProducer().GetRequestId() != 1 {
		t.Fatalf("allowed PRODUCER did not reach the broker: %v", got)
	}
	p.send(producer("persistent://public/secret/t", 2))
	if got := p.recv(); got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthorizationError || got.GetError().GetRequestId() != 2 {
		t.Fatalf("denied PRODUCER: %v", got)
	}
	p.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String("persistent://public/default/t"), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(3), RequestId: proto.Uint64(3)}})
	if got := p.recv(); got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetRequestId() != 3 {
		t.Fatalf("denied SUBSCRIBE: %v", got)
	}
	// An AUTH_RESPONSE the proxy did not ask for is the broker's: relayed.
	p.send(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{
		Response: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte(tok)}}})
	if got := p.recv(); got.GetType() != pb.BaseCommand_AUTH_RESPONSE {
		t.Fatalf("AUTH_RESPONSE for the broker: %v", got)
	}
	am.Wait(t, "pulsar_proxy_credential_refreshes_total", 1, "result", "relayed")
	// The session is still usable after the refusals.
	p.send(producer("persistent://public/default/u", 4))
	if got := p.recv(); got.GetType() != pb.BaseCommand_PRODUCER {
		t.Fatalf("session after denials: %v", got)
	}
	am.Wait(t, "pulsar_proxy_authorization_denials_total", 1, "action", string(authz.ActionProduce))
	am.Wait(t, "pulsar_proxy_authorization_denials_total", 1, "action", string(authz.ActionConsume))
	am.Wait(t, "pulsar_proxy_authorized_commands_total", 2, "action", string(authz.ActionProduce))
}

// challenged reads until an AUTH_CHALLENGE arrives (an echoing broker may send frames first).
func challenged(t *testing.T, p *peer) {
	t.Helper()
	got := recvSkipPings(p)
	if got.GetType() != pb.BaseCommand_AUTH_CHALLENGE || got.GetAuthChallenge().GetChallenge().GetAuthMethodName() != "token" {
		t.Fatalf("want AUTH_CHALLENGE, got %v", got)
	}
}

func authResponse(tok string) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{
		Response: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte(tok)}}}
}

func TestExpiringCredentialsAreRefreshed(t *testing.T) {
	for _, mode := range []string{"lookup", "direct"} {
		t.Run(mode, func(t *testing.T) {
			sec, am := testSecurity(t, "", "")
			b, _, _ := fakeBroker(t)
			addr, m := startSecureProxy(t, sec, nil, oneTarget{b})
			p := dialPeer(t, addr)
			p.send(connectCmd(func(c *pb.CommandConnect) {
				withToken(token(t, testSecret, "alice", time.Second))(c)
				if mode == "direct" {
					c.ProxyToBrokerUrl = proto.String(b.Addr())
				}
			}))
			if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
				t.Fatalf("got %v", got)
			}
			challenged(t, p)
			p.send(authResponse(token(t, testSecret, "alice", 2*time.Second)))
			// Renewed: the next challenge comes when the new token runs out.
			challenged(t, p)
			// Another role's token is not a renewal.
			p.send(authResponse(token(t, testSecret, "mallory", time.Hour)))
			got := recvSkipPings(p)
			if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthenticationError {
				t.Fatalf("want AuthenticationError, got %v", got)
			}
			p.expectClosed()
			waitCounter(t, m.closes.WithLabelValues(string(ReasonAuthExpired)), 1)
			am.Wait(t, "pulsar_proxy_authentication_failures_total", 1, "method", "token", "reason", string(authn.ReasonNoRole))
		})
	}
}

func TestClientThatCannotRefreshIsClosedAtExpiry(t *testing.T) {
	sec, am := testSecurity(t, "", "")
	addr, _ := startSecureProxy(t, sec, nil, noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) {
		withToken(token(t, testSecret, "alice", time.Second))(c)
		c.FeatureFlags = nil
	}))
	p.recv()
	got := recvSkipPings(p)
	if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_AuthenticationError {
		t.Fatalf("want AuthenticationError, got %v", got)
	}
	p.expectClosed()
	am.Wait(t, "pulsar_proxy_authentication_failures_total", 1, "method", "token", "reason", string(authn.ReasonExpired))

	// A client that stays silent when challenged is closed after RefreshTimeout.
	p2 := dialPeer(t, addr)
	p2.send(connectCmd(withToken(token(t, testSecret, "alice", time.Second))))
	p2.recv()
	challenged(t, p2)
	if got := recvSkipPings(p2); got.GetError().GetError() != pb.ServerError_AuthenticationError {
		t.Fatalf("silent client: %v", got)
	}
	p2.expectClosed()
	am.Wait(t, "pulsar_proxy_authentication_failures_total", 1, "method", "token", "reason", string(authn.ReasonRefreshTimeout))
}

// recvSkipPings reads the next command that is not a keep-alive probe.
func recvSkipPings(p *peer) *pb.BaseCommand {
	p.t.Helper()
	for {
		if got := p.recv(); got.GetType() != pb.BaseCommand_PING {
			return got
		}
	}
}
