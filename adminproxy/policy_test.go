package adminproxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
)

type staticPolicy struct{ p *authz.Policy }

func (s staticPolicy) Policy() *authz.Policy { return s.p }

const alicePolicy = `
rules:
  - {roles: [alice], resources: ["acme/alice/*"], actions: [lookup, produce, consume]}
`

func policyProxy(t *testing.T, brk *broker) (*testProxy, *prometheus.Registry) {
	t.Helper()
	p, err := authz.ParsePolicy([]byte(alicePolicy))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := edge.New(edge.Config{Policy: staticPolicy{p}, Metrics: authz.NewMetrics(reg)})
	proxyToken := func() (string, []byte, error) { return "token", []byte("proxy-token"), nil }
	return newProxy(t, Config{Brokers: static(t, brk.url()), Auth: fakeAuth{}, ProxyCredentials: proxyToken, Policy: e}), reg
}

// The first finding of the edge review: with alice's token, a lookup, a peek and a skip on
// bob's namespace reached a broker with the proxy's credentials. The edge refuses them with
// 403 naming the action and the resource, and the broker never hears of them.
func TestHTTPPlaneAppliesThePolicy(t *testing.T) {
	brk := newBroker(t, nil)
	tp, reg := policyProxy(t, brk)
	for _, tc := range []struct{ method, path, action, resource string }{
		{"GET", "/lookup/v2/topic/persistent/acme/bob/private", "lookup", "persistent://acme/bob/private"},
		{"GET", "/admin/v2/persistent/acme/bob/private/subscription/s/position/1", "consume", "persistent://acme/bob/private"},
		{"POST", "/admin/v2/persistent/acme/bob/private/subscription/s/skip_all", "consume", "persistent://acme/bob/private"},
		{"PUT", "/admin/v2/persistent/acme/alice/new", "admin", "persistent://acme/alice/new"},
		{"GET", "/admin/v2/clusters", "", ""},
	} {
		code, body, _ := tp.do(t, tc.method, tc.path, nil, "Authorization", "Bearer role:alice")
		var refusal struct{ Reason, Action, Resource string }
		if err := json.Unmarshal([]byte(body), &refusal); err != nil || code != http.StatusForbidden {
			t.Fatalf("%s %s: %d %s", tc.method, tc.path, code, body)
		}
		if refusal.Action != tc.action || refusal.Resource != tc.resource || !strings.Contains(refusal.Reason, tc.path) && !strings.Contains(refusal.Reason, "alice") {
			t.Errorf("%s %s: refusal %+v, want action %q on %q", tc.method, tc.path, refusal, tc.action, tc.resource)
		}
	}
	if n := len(brk.requests()); n != 0 {
		t.Fatalf("the broker got %d refused requests", n)
	}
	if got := gather(t, reg, "pulsar_proxy_authorization_denials_total", "consume"); got != 2 {
		t.Errorf("consume denials counted %v, want 2", got)
	}
	// What alice may do goes on, as her.
	if code, body, _ := tp.do(t, "GET", "/admin/v2/persistent/acme/alice/t/stats", nil, "Authorization", "Bearer role:alice"); code != 200 {
		t.Fatalf("alice's own stats: %d %s", code, body)
	}
	if r := brk.requests(); len(r) != 1 || r[0].header.Get(headerOriginalPrincipal) != "alice" {
		t.Errorf("broker got %+v", r)
	}
	// A method override cannot turn the GET the edge allowed into something else.
	tp.do(t, "GET", "/admin/v2/persistent/acme/alice/t/stats", nil, "Authorization", "Bearer role:alice",
		"X-HTTP-Method-Override", "DELETE", "X-HTTP-Method", "DELETE", "X-Method-Override", "DELETE")
	if r := brk.requests(); len(r) != 2 || r[1].header.Get("X-HTTP-Method-Override")+r[1].header.Get("X-HTTP-Method")+r[1].header.Get("X-Method-Override") != "" {
		t.Errorf("method overrides reached the broker: %+v", r[len(r)-1].header)
	}
}

// A namespace's topic list over HTTP is cut to what the role may look up, as the binary
// GET_TOPICS_OF_NAMESPACE answer is.
func TestHTTPTopicListIsFiltered(t *testing.T) {
	brk := newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`["persistent://acme/alice/a","persistent://acme/alice/b-partition-0","persistent://acme/alice2/x","persistent://acme/bob/secret"]`))
	})
	tp, _ := policyProxy(t, brk)
	code, body, hdr := tp.do(t, "GET", "/admin/v2/namespaces/acme/alice/topics", nil, "Authorization", "Bearer role:alice")
	var names []string
	if err := json.Unmarshal([]byte(body), &names); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if strings.Join(names, ",") != "persistent://acme/alice/a,persistent://acme/alice/b-partition-0" {
		t.Errorf("alice sees %v", names)
	}
	if hdr.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Errorf("Content-Length %s for %d bytes", hdr.Get("Content-Length"), len(body))
	}
	// A list that cannot be read is not passed on.
	bad := newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { w.Write([]byte(`{"not":"a list"}`)) })
	tp2, _ := policyProxy(t, bad)
	if code, body, _ := tp2.do(t, "GET", "/admin/v2/persistent/acme/alice", nil, "Authorization", "Bearer role:alice"); code != http.StatusBadGateway || !strings.Contains(body, "topic list") {
		t.Errorf("unreadable list: %d %s", code, body)
	}
}

func gather(t *testing.T, reg *prometheus.Registry, name, action string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "action" && l.GetValue() == action {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
