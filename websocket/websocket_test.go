package websocket

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wsRequest is a WebSocket upgrade request for path, as a client's library sends it.
func wsRequest(path string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	return r
}

// tokens is an authenticator that knows two tokens and bob's Basic password.
type tokens struct{}

func (tokens) Authenticate(c authn.Credentials) (authn.Identity, error) {
	switch {
	case c.Method == "token" && string(c.Data) == "alice-token":
		return authn.Identity{Role: "alice", Method: "token"}, nil
	case c.Method == "token" && string(c.Data) == "bob-token":
		return authn.Identity{Role: "bob", Method: "token"}, nil
	case c.Method == "basic" && string(c.Data) == "bob:pw":
		return authn.Identity{Role: "bob", Method: "basic"}, nil
	}
	return authn.Identity{}, &authn.Error{Method: c.Method, Reason: authn.ReasonMalformed}
}

type policy struct{ p *authz.Policy }

func (p policy) Policy() *authz.Policy { return p.p }

// newTestServer is the plane with authentication, a policy granting alice produce on
// acme/a, and no broker: what it answers before anything is made at a broker.
func newTestServer(t *testing.T, maxSessions int) (*Server, *promtest.Registry) {
	s, reg, _ := newTestServerTold(t, maxSessions)
	return s, reg
}

// told records what the plane tells the log's refusal summaries.
type told struct{ lines []string }

func (r *told) Refused(k refusal.Kind, detail, _, msg string) {
	r.lines = append(r.lines, string(k)+" "+detail+": "+msg)
}

func newTestServerTold(t *testing.T, maxSessions int) (*Server, *promtest.Registry, *told) {
	p, err := authz.ParsePolicy([]byte("rules:\n  - {roles: [alice], resources: [\"acme/a/*\"], actions: [produce]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, log := promtest.New(), &told{}
	return New(Config{Clients: pulsarclient.NewFactory(pulsarclient.Config{}), Auth: tokens{}, Policy: edge.New(edge.Config{Policy: policy{p}}),
		Refusals: log, MaxSessions: maxSessions, MaxPendingMessages: 10, MaxBufferedBytes: 1 << 20, Metrics: NewMetrics(reg)}), reg, log
}

// TestRefusedBeforeTheBrokers: every refusal the plane makes on its own, with its status.
func TestRefusedBeforeTheBrokers(t *testing.T) {
	s, reg, log := newTestServerTold(t, 10)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := s.Handler(next)
	cases := []struct {
		name, path, auth string
		status           int
	}{
		{"another plane's path", "/metrics", "", http.StatusTeapot},
		{"a path of no endpoint", "/ws/v2/other/persistent/acme/a/t", "", http.StatusNotFound},
		{"a bad path", "/ws/v2/producer/other/acme/a/t", "", http.StatusBadRequest},
		{"no credentials", "/ws/v2/producer/persistent/acme/a/t", "", http.StatusUnauthorized},
		{"a bad token", "/ws/v2/producer/persistent/acme/a/t", "Bearer nope", http.StatusUnauthorized},
		{"not granted: consume", "/ws/v2/consumer/persistent/acme/a/t/s", "Bearer alice-token", http.StatusForbidden},
		{"not granted: another namespace", "/ws/v2/producer/persistent/acme/b/t", "Bearer alice-token", http.StatusForbidden},
		{"not granted: bob", "/ws/v2/reader/persistent/acme/a/t", "Bearer bob-token", http.StatusForbidden},
		{"Basic credentials, not granted", "/ws/v2/reader/persistent/acme/a/t", "Basic Ym9iOnB3", http.StatusForbidden},
		{"the token parameter, not granted", "/ws/v2/reader/persistent/acme/a/t?token=bob-token", "", http.StatusForbidden},
		{"a bad parameter", "/ws/v2/producer/persistent/acme/a/t?sendTimeoutMillis=x", "Bearer alice-token", http.StatusBadRequest},
		{"a v1 path, its cluster in the name", "/ws/producer/persistent/acme/c1/a/t", "Bearer alice-token", http.StatusForbidden},
		{"a v1 consumer without a subscription", "/ws/consumer/persistent/acme/c1/a/t", "Bearer alice-token", http.StatusBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := wsRequest(c.path)
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.status {
				t.Fatalf("status %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), c.status)
			}
		})
	}
	if v := reg.Value(t, "pulsar_proxy_websocket_sessions_refused_total", "endpoint", "consumer", "code", "403"); v != 1 {
		t.Errorf("refused consumers counted %v, want 1", v)
	}
	// The two refused authentications reach the log's summaries; the policy's refusals are
	// the edge's to tell.
	if len(log.lines) != 2 || !strings.HasPrefix(log.lines[0], "authentication_failed ") {
		t.Errorf("refusal summaries told %q, want the two authentication failures", log.lines)
	}
}

// TestMaxSessions: past websocket.maxSessions an allowed request is answered 503; a request
// without credentials is refused for them first and takes no slot (it cannot crowd out the
// clients that have credentials); a shut-down plane takes none.
func TestMaxSessions(t *testing.T) {
	s, _ := newTestServer(t, 1)
	if !s.admit() {
		t.Fatal("the first request refused")
	}
	h := s.Handler(nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, wsRequest("/ws/v2/producer/persistent/acme/a/t"))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("no credentials, over maxSessions: %d, want 401", w.Code)
	}
	r := wsRequest("/ws/v2/producer/persistent/acme/a/t")
	r.Header.Set("Authorization", "Bearer alice-token")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("over maxSessions: %d, want 503", w.Code)
	}
	s.settled(nil)
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.admit() {
		t.Fatal("a request admitted after Shutdown")
	}
}

// TestRoleConnectionLimit: a role's WebSocket sessions count against its connection limit
// with its sessions on the other planes (one edge): at the limit a request is refused 429
// before anything is made at a broker, and the count is given back when it is refused.
func TestRoleConnectionLimit(t *testing.T) {
	p, err := authz.ParsePolicy([]byte("rules:\n  - {roles: [alice], resources: [\"acme/a/*\"], actions: [produce]}\n" +
		"limits:\n  - {roles: [alice], maxConnections: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := edge.New(edge.Config{Policy: policy{p}})
	log := &told{}
	s := New(Config{Clients: pulsarclient.NewFactory(pulsarclient.Config{}), Auth: tokens{}, Policy: e, Refusals: log,
		MaxSessions: 10, MaxPendingMessages: 10, MaxBufferedBytes: 1 << 20, Metrics: NewMetrics(promtest.New())})
	release, ok := e.AcquireSession("alice") // a binary connection of alice's
	if !ok {
		t.Fatal("alice's first connection refused")
	}
	r := wsRequest("/ws/v2/producer/persistent/acme/a/t")
	r.Header.Set("Authorization", "Bearer alice-token")
	w := httptest.NewRecorder()
	s.Handler(nil).ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "limit") {
		t.Fatalf("over alice's connection limit: %d %s, want 429", w.Code, strings.TrimSpace(w.Body.String()))
	}
	if len(log.lines) != 1 || !strings.HasPrefix(log.lines[0], "connection_limit websocket role_connections") {
		t.Errorf("refusal summaries told %q", log.lines)
	}
	release()
	again, ok := e.AcquireSession("alice")
	if !ok {
		t.Fatal("the refused session's count was not given back")
	}
	again()
}

// lookups counts the plane's lookups, and fails them: the first step of making a producer or
// consumer at the brokers.
type lookups struct{ n atomic.Int32 }

func (l *lookups) Resolve(context.Context, upstream.Client, *pb.BaseCommand) (*pb.BaseCommand, error) {
	l.n.Add(1)
	return nil, errors.New("no brokers here")
}

// TestNoUpgradeNoBrokers: a request the upgrade would refuse (not an upgrade, an origin not
// allowed) is refused before its producer or consumer is made at the brokers: no lookup.
func TestNoUpgradeNoBrokers(t *testing.T) {
	s, _ := newTestServer(t, 10)
	seen := &lookups{}
	s.cfg.Clients = pulsarclient.NewFactory(pulsarclient.Config{Resolver: seen, OperationTimeout: time.Second})
	h := s.Handler(nil)
	alice := func(r *http.Request) { r.Header.Set("Authorization", "Bearer alice-token") }
	for _, c := range []struct {
		name    string
		setup   func(*http.Request)
		status  int
		lookups int32
	}{
		{"not an upgrade", func(r *http.Request) { alice(r); r.Header.Del("Upgrade") }, http.StatusUpgradeRequired, 0},
		{"another site's page", func(r *http.Request) { alice(r); r.Header.Set("Origin", "https://evil.example") }, http.StatusForbidden, 0},
		{"the same origin", func(r *http.Request) { alice(r); r.Header.Set("Origin", "http://example.com") }, http.StatusInternalServerError, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen.n.Store(0)
			r := wsRequest("/ws/v2/producer/persistent/acme/a/t")
			c.setup(r)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.status || seen.n.Load() != c.lookups {
				t.Fatalf("%d %s after %d lookups, want %d after %d", w.Code, strings.TrimSpace(w.Body.String()), seen.n.Load(), c.status, c.lookups)
			}
		})
	}
}

// TestCreateErrors: a broker's refusal of a producer or consumer is the status Pulsar's
// service gives.
func TestCreateErrors(t *testing.T) {
	for _, c := range []struct {
		kind   string
		code   string
		status int
	}{
		{"producer", "ProducerBusy", 409}, {"producer", "TopicNotFound", 500}, {"producer", "AuthorizationError", 403},
		{"consumer", "ConsumerBusy", 409}, {"consumer", "TopicNotFound", 404}, {"consumer", "TooManyRequests", 429},
		{"reader", "ConsumerBusy", 500}, {"reader", "AuthenticationError", 401},
	} {
		err := createError(kindOf(c.kind), &pulsarclient.Error{Code: serverError(c.code), Message: "x"})
		status, _ := refusalOf(err)
		if status != c.status {
			t.Errorf("%s refused with %s: %d, want %d", c.kind, c.code, status, c.status)
		}
	}
	if status, _ := refusalOf(errors.New("other")); status != 500 {
		t.Errorf("another error: %d", status)
	}
}

func kindOf(s string) wsapi.Kind {
	switch s {
	case "producer":
		return wsapi.Producer
	case "consumer":
		return wsapi.Consumer
	}
	return wsapi.Reader
}

func serverError(name string) pb.ServerError { return pb.ServerError(pb.ServerError_value[name]) }

// A consumer's dead-letter topic is produced to in the role's name: a role that may consume
// but not produce there is refused before anything is made at a broker.
func TestDeadLetterTopicNeedsProduce(t *testing.T) {
	p, err := authz.ParsePolicy([]byte("rules:\n  - {roles: [bob], resources: [\"acme/a/*\"], actions: [lookup, consume]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Clients: pulsarclient.NewFactory(pulsarclient.Config{}), Auth: tokens{}, Policy: edge.New(edge.Config{Policy: policy{p}}),
		MaxSessions: 10, MaxPendingMessages: 10, MaxBufferedBytes: 1 << 20, Metrics: NewMetrics(promtest.New())})
	h := s.Handler(http.NotFoundHandler())
	for _, query := range []string{
		"deadLetterTopic=persistent://victim/ns/x&maxRedeliverCount=1",
		"maxRedeliverCount=1", // the default, <topic>-<subscription>-DLQ: still a produce
	} {
		r := wsRequest("/ws/v2/consumer/persistent/acme/a/t/s?" + query)
		r.Header.Set("Authorization", "Bearer bob-token")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "produce") {
			t.Errorf("%s: %d %s, want 403 naming produce", query, w.Code, strings.TrimSpace(w.Body.String()))
		}
	}
}

// TestRefusedUpgradesSpendNothingOfTheRole: another site's page that makes a user's browser
// (which sends the user's client certificate by itself) knock on the API is refused before
// the role's lookup rate is spent: its own lookups go on.
func TestRefusedUpgradesSpendNothingOfTheRole(t *testing.T) {
	p, err := authz.ParsePolicy([]byte("rules:\n  - {roles: [alice], resources: [\"acme/a/*\"], actions: [produce]}\n" +
		"limits:\n  - {roles: [alice], lookupsPerSecond: 0.0001, lookupBurst: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := edge.New(edge.Config{Policy: policy{p}})
	s := New(Config{Clients: pulsarclient.NewFactory(pulsarclient.Config{}), Auth: tokens{}, Policy: e,
		MaxSessions: 10, MaxPendingMessages: 10, MaxBufferedBytes: 1 << 20, Metrics: NewMetrics(promtest.New())})
	h := s.Handler(nil)
	for _, hostile := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") },
		func(r *http.Request) { r.Header.Del("Upgrade") }, // an <img> of the API's URL
	} {
		r := wsRequest("/ws/v2/producer/persistent/acme/a/t")
		r.Header.Set("Authorization", "Bearer alice-token")
		hostile(r)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code < 400 {
			t.Fatalf("a hostile request answered %d", w.Code)
		}
	}
	if d := e.WebSocket(authn.Identity{Role: "alice"}, authz.ActionProduce, "persistent://acme/a/t"); d.Outcome != edge.Forward {
		t.Errorf("after two refused requests alice's own lookup is refused: %d %s", d.Status, d.Message)
	}
}

// TestPublishRateCountsAllAMessageCarries: a producer's message is paced for all it carries
// to brokers (key and properties too), not its payload alone, which a client may leave empty.
func TestPublishRateCountsAllAMessageCarries(t *testing.T) {
	big := strings.Repeat("x", 512<<10)
	out, fail := (&session{}).message([]byte(`{"payload":"","key":"` + big + `","properties":{"p":"` + big + `"}}`))
	if fail != nil {
		t.Fatalf("refused: %s", fail.AppendJSON(nil))
	}
	if got := out.msg.Size(); got < 2*len(big) {
		t.Fatalf("a message carrying two %d-byte strings is counted as %d bytes", len(big), got)
	}
}
