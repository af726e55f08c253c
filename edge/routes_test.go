package edge

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

func mustURL(t testing.TB, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

const routePolicy = `
superUserRoles: [root]
rules:
  - {roles: [alice], resources: ["acme/a/*"], actions: [lookup, produce, consume]}
  - {roles: [ops], resources: ["acme/a/*"], actions: [admin]}
  - {roles: [owner], resources: ["acme/*/*"], actions: [admin]}
  - {roles: [partial], resources: ["acme/a/t-*"], actions: [admin, consume]}
`

// routeCase is one request and what each role gets: Forward, or the refusal's status.
type routeCase struct {
	method, path string
	action       authz.Action // what the route needs ("" for superusers only)
	alice        int          // 0: forwarded
	ops, owner   int
}

const (
	ok        = 0
	forbidden = http.StatusForbidden
)

// routeCases covers every group of the table: lookups, the REST producer, topic lists, a
// topic's metadata, its messages and cursors, its administration, namespaces, tenants,
// schemas, the Functions API, and what is for superusers only.
var routeCases = []routeCase{
	// Lookups and read-only topic metadata need lookup on the topic.
	{"GET", "/lookup/v2/topic/persistent/acme/a/t", authz.ActionLookup, ok, forbidden, forbidden},
	{"GET", "/lookup/v2/topic/persistent/acme/b/private", authz.ActionLookup, forbidden, forbidden, forbidden},
	{"GET", "/lookup/v2/topic/non-persistent/acme/a/t/bundle", authz.ActionLookup, ok, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/a/t/stats", authz.ActionLookup, ok, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/b/private/stats", authz.ActionLookup, forbidden, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/a/t/partitions", authz.ActionLookup, ok, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/a/t-partition-3/internalStats", authz.ActionLookup, ok, forbidden, forbidden},
	{"GET", "/admin/v2/non-persistent/acme/a/t/stats", authz.ActionLookup, ok, forbidden, forbidden},
	// Reading messages and moving cursors need consume.
	{"GET", "/admin/v2/persistent/acme/b/private/subscription/s/position/1", authz.ActionConsume, forbidden, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/a/t/subscription/s/position/1", authz.ActionConsume, ok, forbidden, forbidden},
	{"POST", "/admin/v2/persistent/acme/b/private/subscription/s/skip_all", authz.ActionConsume, forbidden, forbidden, forbidden},
	{"POST", "/admin/v2/persistent/acme/a/t/subscription/s/skip/10", authz.ActionConsume, ok, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/a/t/examinemessage", authz.ActionConsume, ok, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/a/t/ledger/1/entry/2", authz.ActionConsume, ok, forbidden, forbidden},
	{"POST", "/admin/v2/persistent/acme/a/t/subscription/s/resetcursor/0", authz.ActionConsume, ok, forbidden, forbidden},
	{"DELETE", "/admin/v2/persistent/acme/a/t/subscription/s", authz.ActionConsume, ok, forbidden, forbidden},
	{"POST", "/admin/v2/namespaces/acme/a/clearBacklog", authz.ActionConsume, ok, forbidden, forbidden},
	{"POST", "/admin/v2/namespaces/acme/b/unsubscribe/s", authz.ActionConsume, forbidden, forbidden, forbidden},
	// The REST producer needs produce.
	{"POST", "/topics/persistent/acme/a/t", authz.ActionProduce, ok, forbidden, forbidden},
	{"POST", "/topics/persistent/acme/b/private/partitions/0", authz.ActionProduce, forbidden, forbidden, forbidden},
	// Creating, deleting, changing topics and their policies need admin.
	{"PUT", "/admin/v2/persistent/acme/b/new", authz.ActionAdmin, forbidden, forbidden, ok},
	{"PUT", "/admin/v2/persistent/acme/a/new/partitions", authz.ActionAdmin, forbidden, ok, ok},
	{"DELETE", "/admin/v2/persistent/acme/a/t", authz.ActionAdmin, forbidden, ok, ok},
	{"POST", "/admin/v2/persistent/acme/a/t/retention", authz.ActionAdmin, forbidden, ok, ok},
	{"GET", "/admin/v2/persistent/acme/a/t/permissions", authz.ActionAdmin, forbidden, ok, ok},
	// Namespaces: their policies and grants need admin on the whole namespace; a namespace
	// is created in its tenant.
	{"POST", "/admin/v2/namespaces/acme/a/retention", authz.ActionAdmin, forbidden, ok, ok},
	{"GET", "/admin/v2/namespaces/acme/a/permissions", authz.ActionAdmin, forbidden, ok, ok},
	{"GET", "/admin/v2/namespaces/acme/a", authz.ActionAdmin, forbidden, ok, ok},
	{"PUT", "/admin/v2/namespaces/acme/c", authz.ActionAdmin, forbidden, forbidden, ok},
	{"GET", "/admin/v2/namespaces/acme", authz.ActionAdmin, forbidden, forbidden, ok},
	{"GET", "/admin/v2/namespaces/acme/a/retention", authz.ActionLookup, ok, forbidden, forbidden},
	// A namespace's topic list: a lookup grant in it (the answer is filtered).
	{"GET", "/admin/v2/persistent/acme/a", authz.ActionLookup, ok, forbidden, forbidden},
	{"GET", "/admin/v2/persistent/acme/b", authz.ActionLookup, forbidden, forbidden, forbidden},
	{"GET", "/admin/v2/namespaces/acme/a/topics", authz.ActionLookup, ok, forbidden, forbidden},
	// Schemas.
	{"GET", "/admin/v2/schemas/acme/a/t/schema", authz.ActionLookup, ok, forbidden, forbidden},
	{"POST", "/admin/v2/schemas/acme/a/t/schema", authz.ActionAdmin, forbidden, ok, ok},
	// Functions, sources, sinks and packages need admin on the namespace.
	{"GET", "/admin/v3/functions/acme/a", authz.ActionAdmin, forbidden, ok, ok},
	{"POST", "/admin/v3/functions/acme/a/f", authz.ActionAdmin, forbidden, ok, ok},
	{"DELETE", "/admin/v3/sinks/acme/b/s", authz.ActionAdmin, forbidden, forbidden, ok},
	// Tenants and the cluster: superusers only (or not in the table at all).
	{"GET", "/admin/v2/tenants/acme", authz.ActionAdmin, forbidden, forbidden, ok},
	{"PUT", "/admin/v2/tenants/evil", "", forbidden, forbidden, forbidden},
	{"GET", "/admin/v2/tenants", "", forbidden, forbidden, forbidden},
	{"GET", "/admin/v2/clusters", "", forbidden, forbidden, forbidden},
	{"GET", "/admin/v2/brokers/standalone", "", forbidden, forbidden, forbidden},
	{"GET", "/admin/v3/functions/connectors", "", forbidden, forbidden, forbidden},
	{"GET", "/admin/persistent/acme/cluster/a/t/stats", "", forbidden, forbidden, forbidden},
	{"PATCH", "/admin/v2/persistent/acme/a/t/stats", "", forbidden, forbidden, forbidden},
}

// TestEveryRouteGroup is the HTTP plane's decision table, for three roles and a superuser.
func TestEveryRouteGroup(t *testing.T) {
	e := newTestEdge(t, routePolicy)
	for _, tc := range routeCases {
		u := mustURL(t, tc.path)
		for role, want := range map[string]int{"alice": tc.alice, "ops": tc.ops, "owner": tc.owner, "root": ok} {
			d := e.Route(authn.Identity{Role: role}, tc.method, u)
			got := d.Status
			if d.Outcome == Forward {
				got = ok
			}
			if got != want {
				t.Errorf("%s %s as %s: %v %d (%s), want %d", tc.method, tc.path, role, d.Outcome, d.Status, d.Message, want)
			}
			if d.Outcome == Forward && role != "root" && d.Action != tc.action {
				t.Errorf("%s %s as %s: checked %q, want %q", tc.method, tc.path, role, d.Action, tc.action)
			}
			if d.Outcome == Refuse && tc.action != "" && (d.Action != tc.action || d.Resource == "") {
				t.Errorf("%s %s as %s: refusal names %q on %q, want %q on its resource", tc.method, tc.path, role, d.Action, d.Resource, tc.action)
			}
		}
	}
}

// Names that read differently are refused or read as the broker reads them: a %2F stays in
// its segment (the broker decodes it into the topic's local name, a legacy four-part name),
// a matrix parameter is not read at all.
func TestRouteSpellings(t *testing.T) {
	e := newTestEdge(t, routePolicy)
	for _, path := range []string{
		"/admin/v2/persistent/acme/a/x%2F..%2F..%2Fb%2Fprivate/stats",
		"/admin/v2/persistent/acme/a%2Fb/private/stats",
		"/admin/v2/persistent/acme/a;x=1/t/stats",
		"/admin/v2/persistent/acme/a/t;/stats",
		"/lookup/v2/topic/PERSISTENT/acme/a/t",
		"/admin/v2/persistent/acme//a/t/stats",
		"/admin/v2/persistent/acme/a/t%C0%AF/stats",
	} {
		if d := e.Route(alice, "GET", mustURL(t, path)); d.Outcome != Refuse {
			t.Errorf("GET %s as alice: %v, want refused", path, d.Outcome)
		}
	}
	// A trailing slash is the same route.
	if d := e.Route(alice, "GET", mustURL(t, "/admin/v2/persistent/acme/a/t/stats/")); d.Outcome != Forward {
		t.Errorf("a trailing slash: %v, want forward", d.Outcome)
	}
}

// Without a policy the HTTP plane forwards everything (brokers decide).
func TestRoutesWithoutPolicy(t *testing.T) {
	e := newTestEdge(t, "")
	if d := e.Route(alice, "DELETE", mustURL(t, "/admin/v2/clusters/c")); d.Outcome != Forward {
		t.Fatalf("%v, want forward", d.Outcome)
	}
}

// Admin on some topics of a namespace is not admin (or consume) on the namespace.
func TestPartialGrantIsNotTheNamespace(t *testing.T) {
	e := newTestEdge(t, routePolicy)
	partial := authn.Identity{Role: "partial"}
	for _, tc := range []struct {
		method, path string
		want         Outcome
	}{
		{"DELETE", "/admin/v2/persistent/acme/a/t-1", Forward},
		{"DELETE", "/admin/v2/persistent/acme/a/u", Refuse},
		{"POST", "/admin/v2/persistent/acme/a/t-1/subscription/s/skip_all", Forward},
		{"POST", "/admin/v2/namespaces/acme/a/clearBacklog", Refuse},
		{"POST", "/admin/v2/namespaces/acme/a/retention", Refuse},
		{"DELETE", "/admin/v2/namespaces/acme/a", Refuse},
	} {
		if d := e.Route(partial, tc.method, mustURL(t, tc.path)); d.Outcome != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.method, tc.path, d.Outcome, tc.want)
		}
	}
}

// Routes shaped like a namespace's or a topic's that span tenants or the cluster stay with
// superusers, whatever a role may do with every namespace.
func TestClusterRoutesShapedLikeNamespaces(t *testing.T) {
	e := newTestEdge(t, "rules: [{roles: [wide], resources: [\"*/*/*\"], actions: [lookup, produce, consume, admin]}]")
	wide := authn.Identity{Role: "wide"}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/admin/v2/namespaces/standalone/antiAffinity/g"},
		{"POST", "/admin/v3/functions/builtins/reload"},
		{"PUT", "/admin/v3/functions/leader/acme/a/f"},
		{"GET", "/admin/v3/sinks/builtinsinks/x/configdefinition"},
		{"GET", "/admin/v2/tenants"},
	} {
		if d := e.Route(wide, tc.method, mustURL(t, tc.path)); d.Outcome != Refuse {
			t.Errorf("%s %s: %v, want refused", tc.method, tc.path, d.Outcome)
		}
	}
	if d := e.Route(wide, "GET", mustURL(t, "/admin/v2/persistent/acme/a/t/offloadPolicies")); d.Outcome != Forward || d.Action != authz.ActionAdmin {
		t.Errorf("offload policies: %v %s, want forwarded as admin", d.Outcome, d.Action)
	}
}

// A topic segment is read as the broker reads it: the topic routes decode it with Java's
// URLDecoder ('+' is a space), the schema routes as a path segment and then with URLDecoder.
func TestTopicSegmentDecodedAsTheBrokerDoes(t *testing.T) {
	e := newTestEdge(t, `rules: [{roles: [alice], resources: ["acme/a/a+b"], actions: [lookup, consume]}]`)
	for _, tc := range []struct {
		path string
		want Outcome
	}{
		{"/admin/v2/persistent/acme/a/a+b/subscription/s/position/1", Refuse}, // the broker peeks "a b"
		{"/admin/v2/persistent/acme/a/a%2Bb/subscription/s/position/1", Forward},
		{"/lookup/v2/topic/persistent/acme/a/a+b", Refuse},
		{"/admin/v2/schemas/acme/a/a+b/schema", Refuse},      // "a b"
		{"/admin/v2/schemas/acme/a/a%2Bb/schema", Refuse},    // "a+b" decoded again: "a b"
		{"/admin/v2/schemas/acme/a/a%252Bb/schema", Forward}, // "a%2Bb", then "a+b"
	} {
		if d := e.Route(alice, "GET", mustURL(t, tc.path)); d.Outcome != tc.want {
			t.Errorf("GET %s: %v (%s), want %v", tc.path, d.Outcome, d.Resource, tc.want)
		}
	}
}
