package edge

import (
	"net/http"
	"strings"
	"testing"

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
