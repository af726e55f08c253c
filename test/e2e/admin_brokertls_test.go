package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// TestAdminOverBrokerTLS: with broker.tls.enabled the admin API goes to the brokers' TLS web
// service ports, verified against the rig's CA with the client certificate they require (the
// settings of broker.tls), and the brokers' redirects between their https:// endpoints are
// followed.
func TestAdminOverBrokerTLS(t *testing.T) {
	var web []string
	for _, b := range theRig.Brokers {
		if b.HTTPS == "" {
			t.Fatalf("broker %d has no TLS web port: the rig was started without RIG_BROKER%d_WEB_TLS_PORT (an attached rig must be started by test/e2e)", b.N, b.N)
		}
		web = append(web, b.HTTPS)
	}
	pp, err := proxyproc.StartWeb(proxyBinary, t.TempDir(), brokerTLSURLs(t), web, brokerTLSYAML(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pp.Stop()
		if t.Failed() {
			t.Logf("proxy log tail:\n%s", pp.LogTail(40))
		}
	})
	ctx := testCtx(t)
	for n := 1; n <= 2; n++ {
		topic := uniqueTopic(t, "admin-tls")
		if err := theRig.CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
		if err := theRig.PlaceTopic(ctx, topic, n); err != nil {
			t.Fatal(err)
		}
		// The proxy starts each request at the next broker of its list, a rotation its own
		// requests share: ask until one started at the broker that does not own the topic.
		path := "/admin/v2/" + strings.Replace(topic, "://", "/", 1) + "/stats"
		for i := 0; i < 10 && !redirectedFor(t, pp, path); i++ {
			code, body := httpDo(t, "GET", pp.HTTPURL+path, nil)
			var st struct {
				OwnerBroker string `json:"ownerBroker"`
			}
			if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.OwnerBroker != theRig.BrokerID(n) {
				t.Errorf("stats of %s: %d %s", topic, code, body)
			}
		}
	}
	ways := map[string]int{}
	for _, l := range accessLog(t, pp) {
		if l.Redirects > 0 {
			ways[l.Broker+" -> "+l.ServedBy]++
		}
	}
	h1, h2 := hostOf(web[0]), hostOf(web[1])
	if ways[h1+" -> "+h2] == 0 || ways[h2+" -> "+h1] == 0 {
		t.Errorf("want redirects followed both ways between %s and %s, got %v", h1, h2, ways)
	}
}

// redirectedFor reports whether the proxy's access log has a request of path that a broker
// redirected (waiting a moment for the last request's line).
func redirectedFor(t *testing.T, pp *proxyproc.Proc, path string) bool {
	found := false
	wait.Within(time.Second, func() bool {
		for _, l := range accessLog(t, pp) {
			found = found || (l.Path == path && l.Redirects > 0)
		}
		return found
	})
	return found
}
