package edge

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	rlog "github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
)

// TestWebSocket is the WebSocket plane's decision: produce for producers, consume for
// consumers and readers, on the topic of the path, as the policy grants it.
func TestWebSocket(t *testing.T) {
	e := newTestEdge(t, testPolicy)
	open := newTestEdge(t, "")
	bob := authn.Identity{Role: "bob", Method: "token"}
	cases := []struct {
		name    string
		e       *Edge
		id      authn.Identity
		action  authz.Action
		topic   string
		outcome Outcome
		status  int
		reason  Reason
	}{
		{"producer granted", e, alice, authz.ActionProduce, allowedTopic, Forward, 0, ""},
		{"consumer granted", e, alice, authz.ActionConsume, allowedTopic, Forward, 0, ""},
		{"a partition of a granted topic", e, alice, authz.ActionConsume, allowedTopic + "-partition-3", Forward, 0, ""},
		{"non-persistent granted", e, alice, authz.ActionProduce, "non-persistent://acme/a/t", Forward, 0, ""},
		{"another namespace", e, alice, authz.ActionProduce, hiddenTopic, Refuse, http.StatusForbidden, ReasonDenied},
		{"a role without rules", e, bob, authz.ActionConsume, allowedTopic, Refuse, http.StatusForbidden, ReasonDenied},
		{"anonymous", e, authn.Identity{}, authz.ActionConsume, allowedTopic, Refuse, http.StatusForbidden, ReasonDenied},
		{"a v1 name (with a cluster)", e, alice, authz.ActionProduce, "persistent://acme/c1/a/t", Refuse, http.StatusForbidden, ReasonDenied},
		{"not produce or consume", e, alice, authz.ActionLookup, allowedTopic, Refuse, http.StatusForbidden, ReasonType},
		{"without a policy", open, bob, authz.ActionProduce, hiddenTopic, Forward, 0, ""},
		{"without a policy, a v1 name", open, bob, authz.ActionConsume, "persistent://acme/c1/a/t", Forward, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.e.WebSocket(c.id, c.action, c.topic)
			if d.Outcome != c.outcome || d.Status != c.status || d.Reason != c.reason {
				t.Fatalf("got %v status %d reason %q (%s), want %v status %d reason %q", d.Outcome, d.Status, d.Reason, d.Message, c.outcome, c.status, c.reason)
			}
			if d.Outcome == Refuse && d.Message == "" {
				t.Fatal("a refusal without a message")
			}
			if d.Outcome == Forward && (d.Action != c.action || d.Resource != c.topic) {
				t.Fatalf("forwarded as %s on %q, want %s on %q", d.Action, d.Resource, c.action, c.topic)
			}
		})
	}
}

// TestWebSocketLookupRate: opening a session is a lookup; a role over its rate is told 429.
func TestWebSocketLookupRate(t *testing.T) {
	limited := authn.Identity{Role: "limited"}
	e := newTestEdge(t, `
rules:
  - {roles: [limited], resources: ["acme/a/*"], actions: [produce]}
limits:
  - {roles: [limited], lookupsPerSecond: 0.001, lookupBurst: 2}
`)
	for i, want := range []int{0, 0, http.StatusTooManyRequests} {
		d := e.WebSocket(limited, authz.ActionProduce, allowedTopic)
		if d.Status != want {
			t.Fatalf("session %d: status %d (%s), want %d", i+1, d.Status, d.Message, want)
		}
		if want != 0 && d.Reason != ReasonRateLimited {
			t.Fatalf("session %d: reason %q, want %q", i+1, d.Reason, ReasonRateLimited)
		}
	}
}

// refusalLog records what the edge tells the log's summaries.
type refusalLog struct{ details []string }

func (r *refusalLog) Refused(k rlog.Kind, detail, _, told string) {
	r.details = append(r.details, string(k)+" "+detail+": "+told)
}

// TestWebSocketDenialSummed: a WebSocket session the policy refuses reaches the log's
// refusal summaries as the binary planes' denials do; a granted one does not.
func TestWebSocketDenialSummed(t *testing.T) {
	p, err := authz.ParsePolicy([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	log := &refusalLog{}
	e := New(Config{Policy: staticPolicy{p}, Refusals: log})
	e.WebSocket(alice, authz.ActionProduce, allowedTopic)
	e.WebSocket(alice, authz.ActionConsume, hiddenTopic)
	if len(log.details) != 1 || !strings.HasPrefix(log.details[0], "denied consume: ") || !strings.Contains(log.details[0], hiddenTopic) {
		t.Fatalf("refusals told %q, want one denial of consume on %s", log.details, hiddenTopic)
	}
}

// TestRoleLimitsHoldPastTheTable: roles without a limit are not counted; once the table of
// limited roles is full, a new limited role is refused rather than let through unlimited.
func TestRoleLimitsHoldPastTheTable(t *testing.T) {
	p, err := authz.ParsePolicy([]byte("rules:\n  - {roles: [\"*\"], resources: [\"acme/a/*\"], actions: [produce]}\n" +
		"limits:\n  - {roles: [free], lookupsPerSecond: 100}\n  - {roles: [\"*\"], maxConnections: 1, publishBytesPerSecond: 1000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := New(Config{Policy: staticPolicy{p}})
	for i := range maxTrackedRoles {
		if _, ok := e.AcquireSession(fmt.Sprintf("user-%d", i)); !ok {
			t.Fatalf("user-%d refused", i)
		}
	}
	if _, ok := e.AcquireSession("mallory"); ok {
		t.Error("a limited role let through, uncounted, past the table's bound")
	}
	for range 3 {
		if _, ok := e.AcquireSession("free"); !ok {
			t.Fatal("a role without a connection limit refused")
		}
	}
}

// TestPublishRateFollowsThePolicy: a role's publish rate is the one its limit sets, shared
// by its sessions; nil for a role without one, and for every role under a policy that sets
// none (answered without the roles' table) or after a reload takes it away.
func TestPublishRateFollowsThePolicy(t *testing.T) {
	parse := func(limits string) *authz.Policy {
		p, err := authz.ParsePolicy([]byte("rules:\n  - {roles: [\"*\"], resources: [\"acme/a/*\"], actions: [produce]}\n" + limits))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pol := &swappablePolicy{}
	pol.p.Store(parse("limits:\n  - {roles: [paced], publishBytesPerSecond: 1000}\n  - {roles: [\"*\"], maxConnections: 5}\n"))
	e := New(Config{Policy: pol})
	for _, role := range []string{"paced", "other"} {
		if _, ok := e.AcquireSession(role); !ok {
			t.Fatalf("session of %s refused", role)
		}
	}
	l := e.PublishRate("paced")
	if l == nil || l.Limit() != 1000 || e.PublishRate("paced") != l {
		t.Fatalf("paced's rate: %v, want one limiter of 1000 bytes/s for all its sessions", l)
	}
	if l := e.PublishRate("other"); l != nil {
		t.Fatalf("a role without a publish limit is paced at %v", l.Limit())
	}
	pol.p.Store(parse("limits:\n  - {roles: [\"*\"], maxConnections: 5}\n"))
	if l := e.PublishRate("paced"); l != nil {
		t.Fatalf("after a reload without publish limits, paced is still paced at %v", l.Limit())
	}
	e.roles.mu.Lock() // every session's SENDs ask: without a publish limit, none waits for the table
	answered := make(chan struct{})
	go func() { e.PublishRate("paced"); close(answered) }()
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Error("PublishRate waited for the roles' table under a policy that sets no publish rate")
	}
	e.roles.mu.Unlock()
	<-answered
	pol.p.Store(parse("limits:\n  - {roles: [paced], publishBytesPerSecond: 2000}\n  - {roles: [\"*\"], maxConnections: 5}\n"))
	if l := e.PublishRate("paced"); l == nil || l.Limit() != 2000 {
		t.Fatalf("after a reload to 2000 bytes/s, paced's rate: %v", l)
	}
}

// swappablePolicy is a policy source a test reloads.
type swappablePolicy struct{ p atomic.Pointer[authz.Policy] }

func (s *swappablePolicy) Policy() *authz.Policy { return s.p.Load() }
