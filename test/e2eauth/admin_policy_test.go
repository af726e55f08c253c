package e2eauth

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/accesslog"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// TestAdminCLIUnderThePolicy (issue 25, finding 1): alice may look up, produce and consume
// in acme/aliceonly only (the proxy's policy), while the brokers would also let her produce
// and consume in acme/shared. She runs pulsar-admin through the proxy: the stats of her topic
// come back; peeking, skipping and creating topics in acme/shared are refused by the proxy
// with 403 naming the action and the resource, and no broker ever sees them (the brokers'
// access logs have no line for those paths, the subscription's backlog is what it was, the
// topic was not created).
func TestAdminCLIUnderThePolicy(t *testing.T) {
	ctx := ctxT(t, 5*time.Minute)
	mine, theirs := uniqueTopic(nsAliceOnly, "cli"), uniqueTopic(nsShared, "cli")
	for _, topic := range []string{mine, theirs} {
		if err := theRig.CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	if err := theRig.CreateSubscription(ctx, theirs, "s"); err != nil {
		t.Fatal(err)
	}
	c := tokenClient(t, theRig.BrokerURL(1), superUser) // straight to the brokers
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: theirs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("not alice's to read")}); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	backlog := subscriptionBacklog(t, ctx, theirs, "s")
	if backlog != 1 {
		t.Fatalf("backlog of %s/s is %d, want the one message", theirs, backlog)
	}

	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`
rules:
  - {roles: [alice], resources: ["acme/aliceonly/*"], actions: [lookup, produce, consume]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startAdminProxy(t, false, "authz:\n  enabled: true\n  policyFile: "+policy+"\n")
	accesslog.RequireKnownRoutes(t, p.LogPath)
	a := rig.Admin{URL: p.HTTPURL, Token: mustToken("alice", 0), Dir: t.TempDir()}

	res := a.Run(ctx, "topics", "stats", mine)
	var st struct {
		Subscriptions map[string]json.RawMessage `json:"subscriptions"`
	}
	if res.Err != nil || json.Unmarshal([]byte(res.Stdout), &st) != nil {
		t.Fatalf("alice's own topic stats: %s", res)
	}
	newTopic := uniqueTopic(nsShared, "created")
	local := strings.TrimPrefix(theirs, "persistent://")
	for _, tc := range []struct {
		args           []string
		method, path   string
		action, onWhat string
	}{
		{[]string{"topics", "peek-messages", "-s", "s", "-n", "1", theirs}, "GET", "/admin/v2/persistent/" + local + "/subscription/s/position/1", "consume", theirs},
		{[]string{"topics", "skip", "-s", "s", "-n", "1", theirs}, "POST", "/admin/v2/persistent/" + local + "/subscription/s/skip/1", "consume", theirs},
		{[]string{"topics", "create", newTopic}, "PUT", "/admin/v2/persistent/" + strings.TrimPrefix(newTopic, "persistent://"), "admin", newTopic},
	} {
		res := a.Run(ctx, tc.args...)
		if res.Err == nil || !strings.Contains(res.Stdout+res.Stderr, "may not "+tc.action) {
			t.Errorf("pulsar-admin %s: want refused by the proxy (may not %s): %s", tc.args[1], tc.action, res)
		}
		e := lastAccess(t, p, tc.method, tc.path)
		if e.Status != http.StatusForbidden || e.Broker != "" {
			t.Errorf("%s %s: access log %+v, want 403 and no broker", tc.method, tc.path, e)
		}
		code, body := adminCall(t, tc.method, p.HTTPURL+tc.path, "alice", "")
		var refusal struct{ Reason, Action, Resource string }
		if code != http.StatusForbidden || json.Unmarshal([]byte(body), &refusal) != nil || refusal.Action != tc.action || refusal.Resource != tc.onWhat {
			t.Errorf("%s %s: %d %s, want 403 naming %s on %s", tc.method, tc.path, code, body, tc.action, tc.onWhat)
		}
		if n := brokerLogCount(t, tc.path); n != 0 {
			t.Errorf("%s reached a broker: %d lines of the brokers' access logs", tc.path, n)
		}
	}
	// The control: the brokers' access logs do show the stats request that went through.
	if n := brokerLogCount(t, "/admin/v2/persistent/"+strings.TrimPrefix(mine, "persistent://")+"/stats"); n == 0 {
		t.Errorf("the brokers' access logs show no stats request: they cannot prove the refused ones did not arrive")
	}
	if got := subscriptionBacklog(t, ctx, theirs, "s"); got != backlog {
		t.Errorf("backlog of %s/s went from %d to %d", theirs, backlog, got)
	}
	if _, err := theRig.TopicStats(ctx, newTopic); err == nil {
		t.Errorf("%s was created", newTopic)
	}
}

func subscriptionBacklog(t *testing.T, ctx context.Context, topic, sub string) int64 {
	t.Helper()
	st, err := theRig.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := st.Subscriptions[sub]
	if !ok {
		t.Fatalf("%s has no subscription %s", topic, sub)
	}
	return s.MsgBacklog
}
