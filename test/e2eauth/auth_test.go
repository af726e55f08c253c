package e2eauth

import (
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

const allowAll = `
rules:
  - roles: ["*"]
    resources: ["*/*/*"]
    actions: [lookup, produce, consume]
`

// Alice, granted by the brokers and allowed by the proxy, produces and consumes 1,000
// messages through the proxy.
func TestAuthorizedClientProducesAndConsumes(t *testing.T) {
	p := startProxy(t, allowAll, "")
	produceConsume(t, tokenClient(t, p.PulsarURL, "alice"), uniqueTopic(nsShared, "alice"), 1000)
	if got := p.metric(t, "pulsar_proxy_authorized_commands_total", `action="produce"`); got < 1 {
		t.Fatalf("authorized PRODUCER commands = %v", got)
	}
}

// The proxy allows everyone; the brokers grant only alice on nsAliceOnly. Bob is refused by
// the broker, which shows the broker authorizes original_principal (bob), not the proxy's
// role (which is granted there).
func TestBrokerAuthorizesOriginalPrincipal(t *testing.T) {
	p := startProxy(t, allowAll, "")
	topic := uniqueTopic(nsAliceOnly, "t")
	produceConsume(t, tokenClient(t, p.PulsarURL, "alice"), topic, 10)

	bob := tokenClient(t, p.PulsarURL, "bob")
	_, err := bob.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "Authorization") {
		t.Fatalf("bob's producer: err = %v, want the broker's authorization refusal", err)
	}
	t.Logf("bob refused: %v", err)
	if got := p.count(t, "pulsar_proxy_authorization_denials_total"); got != 0 {
		t.Fatalf("the proxy denied %v commands; the refusal must be the broker's", got)
	}
}

// The proxy's policy denies bob produce on nsShared (the brokers would allow it): his
// PRODUCER is answered at the proxy and never reaches a broker.
func TestProxyRefusesProducerBeforeTheBroker(t *testing.T) {
	p := startProxy(t, `
rules:
  - roles: [alice]
    resources: ["acme/*/*"]
    actions: [lookup, produce, consume]
  - roles: [bob]
    resources: ["acme/shared/*"]
    actions: [lookup, consume]
`, "")
	topic := uniqueTopic(nsShared, "bob")
	bob := tokenClient(t, p.PulsarURL, "bob")
	_, err := bob.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		t.Fatalf("bob's producer: err = %v, want AuthorizationError", err)
	}
	t.Logf("bob refused: %v", err)
	if got := p.metric(t, "pulsar_proxy_authorization_denials_total", `action="produce"`); got < 1 {
		t.Fatalf("denials = %v", got)
	}
	if got := p.count(t, "pulsar_proxy_authorized_commands_total", `action="produce"`); got != 0 {
		t.Fatalf("%v PRODUCER commands were forwarded", got)
	}
	// No broker ever saw a producer on the topic: it was never created.
	if _, err := brokers().TopicStats(ctxT(t, time.Minute), topic); !rig.IsStatus(err, 404) {
		t.Fatalf("topic stats: err = %v, want 404 (no PRODUCER reached a broker)", err)
	}
	// Bob may still consume there, on the same kind of session.
	cons, err := bob.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("bob's consumer: %v", err)
	}
	cons.Close()
	produceConsume(t, tokenClient(t, p.PulsarURL, "alice"), topic, 10)
}

// rawConnect speaks the protocol to the proxy directly, for what pulsar-client-go cannot
// send (an unknown auth method, GET_TOPICS_OF_NAMESPACE).
func rawConnect(t *testing.T, addr string, method string, data []byte) (net.Conn, *frame.Reader, *pb.BaseCommand) {
	t.Helper()
	return rawConnectWith(t, addr, func(c *pb.CommandConnect) {
		if method != "" {
			c.AuthMethodName, c.AuthData = proto.String(method), data
		}
	})
}

// rawConnectWith is rawConnect with the CONNECT set up by mut.
func rawConnectWith(t *testing.T, addr string, mut func(*pb.CommandConnect)) (net.Conn, *frame.Reader, *pb.BaseCommand) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	connect := &pb.CommandConnect{ClientVersion: proto.String("e2eauth"), ProtocolVersion: proto.Int32(21)}
	mut(connect)
	if err := frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: connect}); err != nil {
		t.Fatal(err)
	}
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	return c, r, readCmd(t, r)
}

func readCmd(t *testing.T, r *frame.Reader) *pb.BaseCommand {
	t.Helper()
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := frame.Decode(f.Command)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// A role allowed only acme/listing/a-* lists only those topics, on a lookup connection and
// on a direct session to a broker (multiplexed in TestAuthMultiplexed), the answer carrying
// the client's own request id.
func TestTopicListIsFiltered(t *testing.T) {
	p := startProxy(t, `
rules:
  - roles: [carol]
    resources: ["acme/listing/a-*"]
    actions: [lookup, consume]
`, "")
	want := []string{"persistent://acme/listing/a-1", "persistent://acme/listing/a-2"}
	c, r, resp := rawConnect(t, p.Addr, "token", []byte(mustToken("carol", 0)))
	if resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: %v", resp)
	}
	if got := listTopics(t, c, r, 4711); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("lookup connection: topics = %v, want %v", got, want)
	}
	c, r = directConnect(t, p.Addr, strings.TrimPrefix(brokers().BrokerURL(1), "pulsar://"), "carol")
	if got := listTopics(t, c, r, 4712); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("direct session: topics = %v, want %v", got, want)
	}
	// The same request from a superuser-free role with the whole namespace shows the broker
	// has more: the filtering is the proxy's.
	all := startProxy(t, allowAll, "")
	c2, r2, _ := rawConnect(t, all.Addr, "token", []byte(mustToken("carol", 0)))
	if n := len(listTopics(t, c2, r2, 4713)); n != 3 {
		t.Fatalf("unfiltered list has %d topics, want 3", n)
	}
}

// listTopics asks for acme/listing's topics with request id and returns the answer's, which
// must carry that id.
func listTopics(t *testing.T, c net.Conn, r *frame.Reader, id uint64) []string {
	t.Helper()
	frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
		RequestId: proto.Uint64(id), Namespace: proto.String(nsListing), Mode: pb.CommandGetTopicsOfNamespace_ALL.Enum()}})
	resp := readCmd(t, r)
	got := resp.GetGetTopicsOfNamespaceResponse()
	if got == nil || got.GetRequestId() != id {
		t.Fatalf("GET_TOPICS_OF_NAMESPACE %d answered by %v", id, resp)
	}
	return got.GetTopics()
}

// Clients without valid credentials are refused at CONNECT with AuthenticationError.
func TestConnectRefusals(t *testing.T) {
	p := startProxy(t, "", "")
	other := make([]byte, 32)
	copy(other, "a key that is not the rig's key!")
	otherKey, _ := signWith(other, "alice", 0)
	cases := []struct {
		name   string
		auth   pulsar.Authentication
		reason string
	}{
		{"expired", pulsar.NewAuthenticationToken(mustToken("alice", -time.Minute)), "expired"},
		{"other key", pulsar.NewAuthenticationToken(otherKey), "bad_signature"},
		{"malformed", pulsar.NewAuthenticationToken("not-a-token"), "malformed"},
		{"no token", nil, "no_credentials"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clientWithTimeout(t, p.PulsarURL, tc.auth, 3*time.Second)
			_, err := c.CreateProducer(pulsar.ProducerOptions{Topic: uniqueTopic(nsShared, "x"), SendTimeout: time.Second})
			if err == nil {
				t.Fatal("producer created without valid credentials")
			}
			if got := p.metric(t, "pulsar_proxy_authentication_failures_total", `reason="`+tc.reason+`"`); got < 1 {
				t.Fatalf("failures{reason=%s} = %v (client error: %v)", tc.reason, got, err)
			}
		})
	}
	t.Run("unknown method", func(t *testing.T) {
		_, _, resp := rawConnect(t, p.Addr, "kerberos", []byte("x"))
		if resp.GetError().GetError() != pb.ServerError_AuthenticationError || !strings.Contains(resp.GetError().GetMessage(), "not enabled") {
			t.Fatalf("got %v", resp)
		}
	})
	// The exact answer the client gets, for each case.
	for _, tc := range []struct{ tok, want string }{
		{mustToken("alice", -time.Minute), "expired"},
		{otherKey, "bad_signature"},
		{"not-a-token", "malformed"},
	} {
		_, _, resp := rawConnect(t, p.Addr, "token", []byte(tc.tok))
		if resp.GetError().GetError() != pb.ServerError_AuthenticationError || !strings.Contains(resp.GetError().GetMessage(), tc.want) {
			t.Fatalf("got %v, want AuthenticationError saying %s", resp, tc.want)
		}
	}
	_, _, resp := rawConnect(t, p.Addr, "", nil)
	if resp.GetError().GetError() != pb.ServerError_AuthenticationError {
		t.Fatalf("no credentials: got %v", resp)
	}
}

// A client whose 10-second tokens are renewed by its supplier keeps producing for 40 seconds
// without losing a message. The proxy challenges it each time its token expires; the brokers,
// which hold its forwarded credentials, challenge it too, through the proxy, and would close
// the connection if its answer did not reach them (multiplexed, the brokers hold the proxy's
// credentials, and only the proxy challenges).
func TestTokenRefreshKeepsSessionsAlive(t *testing.T) {
	brokerRefreshes := brokerLogCount(t, "Refreshed authentication credentials for role alice")
	p := startProxy(t, "", "")
	var minted atomic.Int32
	supplier := func() (string, error) {
		minted.Add(1)
		return token("alice", 10*time.Second)
	}
	c := client(t, p.PulsarURL, pulsar.NewAuthenticationTokenFromSupplier(supplier))
	topic := uniqueTopic(nsShared, "refresh")
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx := ctxT(t, 2*time.Minute)
	sent := 0
	for end := time.Now().Add(40 * time.Second); time.Now().Before(end); sent++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte{byte(sent), byte(sent >> 8)}}); err != nil {
			t.Fatalf("send %d: %v", sent, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range sent {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d of %d: %v", i, sent, err)
		}
		if got := int(m.Payload()[0]) | int(m.Payload()[1])<<8; got != i {
			t.Fatalf("message %d: got %d", i, got)
		}
		cons.Ack(m)
	}
	refreshed := p.metric(t, "pulsar_proxy_credential_refreshes_total", `result="ok"`)
	if refreshed < 3 {
		t.Fatalf("%v refreshes in 40 s of 10 s tokens (supplier called %d times)", refreshed, minted.Load())
	}
	if got := p.count(t, "pulsar_proxy_session_closes_total", `reason="credentials_expired"`); got != 0 {
		t.Fatalf("%v sessions closed for expired credentials", got)
	}
	if closed := p.count(t, "pulsar_proxy_session_closes_total", `reason="broker_closed"`); closed != 0 {
		t.Fatalf("brokers closed %v sessions", closed)
	}
	if multiplexed() {
		// A shared broker connection holds the proxy's credentials, not alice's: the brokers
		// have none of hers to challenge, so nothing is relayed; the proxy's own renewals
		// (above) kept her session.
		if relayed := p.count(t, "pulsar_proxy_credential_refreshes_total", `result="relayed"`); relayed != 0 {
			t.Fatalf("%v broker challenges relayed to a client of a shared broker connection", relayed)
		}
		t.Logf("multiplexed: sent and received %d messages over 40 s; %v refreshes at the proxy", sent, refreshed)
		return
	}
	relayed := p.metric(t, "pulsar_proxy_credential_refreshes_total", `result="relayed"`)
	if relayed < 1 {
		t.Fatal("no broker challenge was answered through the proxy")
	}
	// The brokers say so too.
	if n := brokerLogCount(t, "Refreshed authentication credentials for role alice"); n <= brokerRefreshes {
		t.Fatalf("the brokers logged no refresh of alice's credentials (%d before, %d after)", brokerRefreshes, n)
	}
	t.Logf("sent and received %d messages over 40 s; %v refreshes at the proxy, %v answers to broker challenges relayed", sent, refreshed, relayed)
}

// A client that cannot renew (its supplier keeps returning the same token) is disconnected
// with AuthenticationError when the token expires.
func TestExpiredClientIsDisconnected(t *testing.T) {
	p := startProxy(t, "", "")
	tok := mustToken("alice", 8*time.Second)
	c := client(t, p.PulsarURL, pulsar.NewAuthenticationToken(tok))
	topic := uniqueTopic(nsShared, "expire")
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx := ctxT(t, time.Minute)
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 45*time.Second, "a session closed for expired credentials", func() bool {
		return p.count(t, "pulsar_proxy_session_closes_total", `reason="credentials_expired"`) >= 1
	})
	if got := p.metric(t, "pulsar_proxy_authentication_failures_total", `method="token"`, `reason="expired"`); got < 1 {
		t.Fatalf("failures{expired} = %v", got)
	}
	// It cannot come back with the expired token either: the send fails, and a new connection
	// with that token is refused by the proxy for that reason (not a time-out or a dial
	// failure, which would pass a bare "an error happened" check).
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err == nil {
		t.Fatal("a send succeeded after the client's credentials expired")
	} else {
		t.Logf("send after expiry: %v", err)
	}
	expired := p.metric(t, "pulsar_proxy_authentication_failures_total", `method="token"`, `reason="expired"`)
	again := clientWithTimeout(t, p.PulsarURL, pulsar.NewAuthenticationToken(tok), 3*time.Second)
	if _, err := again.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Second}); err == nil {
		t.Fatal("a producer was created with the expired token")
	}
	if got := p.metric(t, "pulsar_proxy_authentication_failures_total", `method="token"`, `reason="expired"`); got <= expired {
		t.Fatalf("failures{token,expired} %v before a new connection with the expired token, %v after: it was not refused as expired", expired, got)
	}
	_, _, resp := rawConnect(t, p.Addr, "token", []byte(tok))
	if resp.GetError().GetError() != pb.ServerError_AuthenticationError || !strings.Contains(resp.GetError().GetMessage(), "expired") {
		t.Fatalf("CONNECT with the expired token: %v, want AuthenticationError saying expired", resp)
	}
}

// A policy change reaches running sessions' new PRODUCER commands within 5 seconds; a broken
// policy file is logged and ignored.
func TestPolicyReload(t *testing.T) {
	p := startProxy(t, allowAll, "")
	topic := uniqueTopic(nsShared, "reload")
	dave := tokenClient(t, p.PulsarURL, "dave")
	first, err := dave.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	ctx := ctxT(t, time.Minute)

	writePolicy(t, p.policyFile, `
rules:
  - roles: ["*"]
    resources: ["*/*/*"]
    actions: [lookup, consume]
`)
	changed := time.Now()
	wait.Until(t, 5*time.Second, "the policy change to be in force (dave's producer refused)", func() bool {
		pr, err := dave.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err == nil {
			pr.Close()
		}
		return err != nil && strings.Contains(err.Error(), "AuthorizationError")
	})
	refusedAfter := time.Since(changed)
	t.Logf("new policy in force after %s", refusedAfter.Round(time.Millisecond))
	// The producer opened before the change keeps its session.
	if _, err := first.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("still here")}); err != nil {
		t.Fatalf("existing producer after reload: %v", err)
	}

	errorsBefore := p.count(t, "pulsar_proxy_policy_reloads_total", `result="error"`)
	writePolicy(t, p.policyFile, "rules: [ {roles: [dave], actions: [fly]} ]\n")
	wait.Until(t, 30*time.Second, "the broken policy to be reported", func() bool {
		return p.count(t, "pulsar_proxy_policy_reloads_total", `result="error"`) > errorsBefore
	})
	if !strings.Contains(p.LogTail(50), "keeping the one in force") {
		t.Fatalf("broken policy not logged:\n%s", p.LogTail(20))
	}
	// Still the last good policy: consume allowed, produce refused.
	if _, err := dave.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		t.Fatalf("after a broken policy: producer err = %v, want AuthorizationError", err)
	}
	cons, err := dave.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("after a broken policy: subscribe: %v", err)
	}
	cons.Close()
}

var writeMu sync.Mutex

// writePolicy replaces the file atomically, as config management tools do.
func writePolicy(t *testing.T, path, policy string) {
	t.Helper()
	writeMu.Lock()
	defer writeMu.Unlock()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// brokerLogCount counts the lines of both brokers' logs that contain s.
func brokerLogCount(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, key := range []string{"BROKER1_LOG", "BROKER2_LOG"} {
		b, err := os.ReadFile(brokers().State(key))
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), s)
	}
	return n
}

// The auth rig's brokers authenticate original_auth_data, so they refuse the proxy's own
// connections (ownPrincipal carries no credentials). The proxy still reports ready: a broker
// that answers CONNECT is up, and the refusal is logged once per broker.
func TestReadyWhenBrokersRefuseTheProxysOwnConnection(t *testing.T) {
	p := startProxy(t, allowAll, "")
	var code int
	var body string
	if !wait.Within(15*time.Second, func() bool {
		code, body = p.Get("/readyz")
		return code == 200
	}) {
		t.Fatalf("/readyz %d %s", code, body)
	}
	if log := p.LogTail(1000); !strings.Contains(log, "broker refuses the proxy's own connection") {
		t.Fatalf("no log line about the refusal:\n%s", log)
	}
}
