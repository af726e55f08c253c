package e2eauth

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/wsclient"
)

// The WebSocket API's authentication and authorization, compared with the brokers' own
// WebSocket service (webSocketServiceEnabled=true on this rig's brokers, which authenticate
// tokens and authorize roles): the same requests, the same HTTP statuses, except where
// docs/websocket.md says why not.

// wsAttempt is one request: a role's credentials (in the Authorization header, or in the
// token query parameter) on an endpoint.
type wsAttempt struct {
	name   string
	path   string
	header string // the Authorization header, "" for none
	param  string // the token query parameter, "" for none
}

func wsAttempts(t *testing.T) []wsAttempt {
	shared := "persistent://" + nsShared + "/" + strings.ReplaceAll(t.Name(), "/", "-")
	aliceOnly := "persistent://" + nsAliceOnly + "/" + strings.ReplaceAll(t.Name(), "/", "-")
	producer := func(topic string) string { return wsclient.Path("producer", topic, "", nil) }
	consumer := func(topic string) string { return wsclient.Path("consumer", topic, "s", nil) }
	reader := func(topic string) string { return wsclient.Path("reader", topic, "", nil) }
	alice, bob := mustToken("alice", 0), mustToken("bob", 0)
	forged, _ := signWith([]byte("another key, not the rig's one...."), "alice", 0)
	expired := mustToken("alice", -time.Minute)
	return []wsAttempt{
		{"no credentials", producer(shared), "", ""},
		{"not a token", producer(shared), "Bearer not-a-token", ""},
		{"another key's token", producer(shared), "Bearer " + forged, ""},
		{"an expired token", producer(shared), "Bearer " + expired, ""},
		{"basic auth", producer(shared), "Basic YWxpY2U6cHc=", ""},
		{"alice produces", producer(shared), "Bearer " + alice, ""},
		{"alice consumes", consumer(shared), "Bearer " + alice, ""},
		{"alice reads", reader(shared), "Bearer " + alice, ""},
		{"alice's token parameter", producer(shared), "", "Bearer " + alice},
		{"alice's token parameter without Bearer", producer(shared), "", alice}, // both take it bare too
		{"bob on alice's namespace: producer", producer(aliceOnly), "Bearer " + bob, ""},
		{"bob on alice's namespace: consumer", consumer(aliceOnly), "Bearer " + bob, ""},
		{"bob on alice's namespace: reader", reader(aliceOnly), "Bearer " + bob, ""},
		{"bob's token parameter on alice's namespace", consumer(aliceOnly), "", "Bearer " + bob},
		{"alice on her namespace", consumer(aliceOnly), "Bearer " + alice, ""},
	}
}

// wsStatus is the HTTP status of an attempt (101: upgraded), and for an upgraded producer
// the result of one message.
func wsStatus(t *testing.T, ctx context.Context, base string, a wsAttempt) string {
	path := a.path
	if a.param != "" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "token=" + url.QueryEscape(a.param)
	}
	h := http.Header{}
	if a.header != "" {
		h.Set("Authorization", a.header)
	}
	c, err := wsclient.Dial(ctx, base, path, h)
	status := wsclient.StatusOf(err)
	if err != nil {
		return fmt.Sprint(status)
	}
	defer c.CloseNow()
	if !strings.Contains(path, "/producer/") {
		return fmt.Sprint(status)
	}
	if err := c.Send(ctx, map[string]any{"payload": wsclient.Payload([]byte("hi"))}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(ctx)
	if err != nil {
		return fmt.Sprintf("%d, then %v", status, err)
	}
	return fmt.Sprintf("%d, %v", status, m["result"])
}

// TestWebSocketAuthDifferential: credentials and rights decide alike at the brokers' own
// WebSocket service and at the proxy's, whose brokers decide for the client's role (the
// proxy without a policy of its own: original_principal).
//
// A difference is asked again twice: the brokers' service answers from a live cluster, and
// only a difference that stays is the proxy's. Differences are restated after the proxy's
// log digest, so that the end of a failed run's output names them.
func TestWebSocketAuthDifferential(t *testing.T) {
	var differences []string
	t.Cleanup(func() { // registered first, so it runs after the proxy's cleanup
		for _, d := range differences {
			t.Errorf("difference: %s", d)
		}
	})
	p := startProxy(t, "", "websocket:\n  enabled: true\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	broker := "ws" + strings.TrimPrefix(brokers().Brokers[0].HTTP, "http")
	proxy := "ws" + strings.TrimPrefix(p.HTTPURL, "http")
	for _, a := range wsAttempts(t) {
		var b, px string
		for try := 1; try <= 3; try++ {
			b, px = wsStatus(t, ctx, broker, a), wsStatus(t, ctx, proxy, a)
			t.Logf("%-45s broker %-12s proxy %s", a.name, b, px)
			if b == px {
				break
			}
		}
		if b != px {
			t.Fail() // now, so that the proxy's cleanup prints its log digest
			differences = append(differences,
				fmt.Sprintf("%s: the broker's service answers %s, the proxy %s", a.name, b, px))
		}
	}
}

// TestWebSocketProxyPolicy: with a policy of its own the proxy refuses at the edge what the
// policy does not grant (403 before any broker hears of it), and lets through what it does.
func TestWebSocketProxyPolicy(t *testing.T) {
	policy := "rules:\n  - {roles: [alice], resources: [\"" + nsShared + "/*\"], actions: [produce]}\n"
	p := startProxy(t, policy, "websocket:\n  enabled: true\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := "ws" + strings.TrimPrefix(p.HTTPURL, "http")
	topic := "persistent://" + nsShared + "/ws-policy"
	alice := "Bearer " + mustToken("alice", 0)
	for _, c := range []struct {
		a    wsAttempt
		want string
	}{
		{wsAttempt{"produce granted", wsclient.Path("producer", topic, "", nil), alice, ""}, "101, ok"},
		{wsAttempt{"consume not granted", wsclient.Path("consumer", topic, "s", nil), alice, ""}, "403"},
		{wsAttempt{"reader not granted", wsclient.Path("reader", topic, "", nil), alice, ""}, "403"},
		{wsAttempt{"another namespace", wsclient.Path("producer", "persistent://"+nsAliceOnly+"/x", "", nil), alice, ""}, "403"},
	} {
		if got := wsStatus(t, ctx, base, c.a); got != c.want {
			t.Errorf("%s: %s, want %s", c.a.name, got, c.want)
		}
	}
	if v := p.count(t, "pulsar_proxy_websocket_sessions_refused_total", `endpoint="consumer"`, `code="403"`); v < 1 {
		t.Errorf("refused consumers counted %v, want at least 1", v)
	}
}
