package edge

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// Hostile review (attack-review branch): tests that fail on the code as reviewed.

// schemaTopicAsBrokerReads is the local name a Pulsar broker acts on for the {topic} segment
// of /admin/v2/schemas/{tenant}/{namespace}/{topic}/...: SchemasResource takes the segment
// as a plain @PathParam (Jersey decodes it once) and hands it to
// AdminResource.validateTopicName, which decodes it again with Codec.decode
// (java.net.URLDecoder: '+' is a space, %XX decoded).
func schemaTopicAsBrokerReads(t *testing.T, raw string) string {
	t.Helper()
	once, err := url.PathUnescape(raw)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := url.QueryUnescape(once)
	if err != nil {
		t.Fatal(err)
	}
	return twice
}

// TestReviewSchemaTopicDecodedTwiceByTheBroker: the edge reads a schema route's topic decoded
// once, the broker twice. A role granted topics of one namespace reaches, through the schema
// routes, a name the edge never checked: with "x%252Fy" the edge checks
// persistent://acme/a/x%2Fy (in the granted namespace), the broker acts on
// persistent://acme/a/x/y, a legacy name (tenant acme, cluster a, namespace x) the policy
// says is always denied; with "a+b" the edge checks "a+b", the broker "a b". An attacker
// gains the schema routes (read with lookup; upload and delete with admin) on topics outside
// its grant wherever the double decoding lands on an existing name. Fix: read the schema
// routes' {topic} as the other topic routes (Codec.decode of the raw segment) after a
// first path-decode, i.e. QueryUnescape(PathUnescape(raw)), or refuse a segment that has
// '%' or '+' left after one decoding.
func TestReviewSchemaTopicDecodedTwiceByTheBroker(t *testing.T) {
	e := newTestEdge(t, `rules:
  - {roles: [alice], resources: ["acme/a/*"], actions: [lookup]}
  - {roles: [bob], resources: ["acme/b/a+b"], actions: [lookup]}
`)
	for _, tc := range []struct {
		role, seg string
	}{
		{"alice", "x%252Fy"},
		{"bob", "a+b"},
		{"bob", "a%2Bb"},
	} {
		ns := "acme/a"
		if tc.role == "bob" {
			ns = "acme/b"
		}
		path := "/admin/v2/schemas/" + ns + "/" + tc.seg + "/schema"
		d := e.Route(authn.Identity{Role: tc.role}, "GET", mustURL(t, path))
		if d.Outcome != Forward {
			continue
		}
		acted := "persistent://" + ns + "/" + schemaTopicAsBrokerReads(t, tc.seg)
		allowed := e.currentPolicy().Allowed(tc.role, authz.ActionLookup, acted)
		if d.Resource != acted && !allowed {
			t.Errorf("GET %s as %s: the edge checked %q and forwarded; the broker acts on %q, which %s may not look up (legacy name: %v)",
				path, tc.role, d.Resource, acted, tc.role, strings.Count(strings.TrimPrefix(acted, "persistent://"), "/") > 2)
		}
	}
}

// TestReviewBundleTopicHashPositionsListsHiddenTopics: GET
// /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/topicHashPositions without ?topics=
// answers every topic of the bundle by name (Namespaces.getTopicHashPositions; the broker
// asks only GET_BUNDLE, which it grants to any role that may produce or consume in the
// namespace). The table takes it for a namespace's "{policy}/{detail}" (lookup somewhere in
// the namespace) and forwards it unfiltered, so a role confined by the proxy's policy to
// some topics of a namespace (the case the policy exists for) lists the topics the
// namespace's topic lists hide from it. Fix: an entry for it before the catch-all, as a topic
// list (its answer filtered, here a map keyed by topic) or for admin on the namespace.
func TestReviewBundleTopicHashPositionsListsHiddenTopics(t *testing.T) {
	e := newTestEdge(t, `rules: [{roles: [carol], resources: ["acme/a/public-*"], actions: [lookup, consume]}]`)
	carol := authn.Identity{Role: "carol"}
	path := "/admin/v2/namespaces/acme/a/0x00000000_0xffffffff/topicHashPositions"
	if d := e.Route(carol, "GET", mustURL(t, path)); d.Outcome == Forward && !d.FilterTopics {
		t.Fatalf("GET %s as carol (lookup on acme/a/public-* only): forwarded unfiltered (%s on %s); the answer names every topic of the bundle", path, d.Action, d.Resource)
	}
}

// TestReviewHTTPLookupsBesidesLookupV2SkipTheRate: a Pulsar client given an http:// service
// URL does its discovery over HTTP (HttpLookupService): the broker by /lookup/v2/topic, but
// partitioned metadata by GET /admin/v2/{domain}/.../{topic}/partitions, a namespace's topics
// by GET /admin/v2/namespaces/{tenant}/{namespace}/topics and schemas by GET
// /admin/v2/schemas/.../schema. On the binary planes PARTITIONED_METADATA,
// GET_TOPICS_OF_NAMESPACE and GET_SCHEMA take a token of the role's lookup rate; over HTTP
// only /lookup/ does. A role over its lookup rate (or any role, to multiply it) goes on
// sending the same broker and metadata-store work over HTTP. Fix: count the HTTP forms of
// the rate-limited binary requests (mark them in the route table) in the same bucket.
func TestReviewHTTPLookupsBesidesLookupV2SkipTheRate(t *testing.T) {
	p, err := authz.ParsePolicy([]byte(`
rules:
  - {roles: [limited], resources: ["*/*/*"], actions: [lookup]}
limits:
  - {roles: [limited], lookupsPerSecond: 1, lookupBurst: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	e := New(Config{Policy: staticPolicy{p}, Now: func() time.Time { return now }})
	limited := authn.Identity{Role: "limited"}
	if d := e.Route(limited, "GET", mustURL(t, "/lookup/v2/topic/persistent/acme/a/t")); d.Outcome != Forward {
		t.Fatalf("the first lookup: %v", d.Outcome)
	}
	if d := e.Route(limited, "GET", mustURL(t, "/lookup/v2/topic/persistent/acme/a/t")); d.Status != 429 {
		t.Fatalf("the second lookup: %v %d, want 429", d.Outcome, d.Status)
	}
	for _, path := range []string{
		"/admin/v2/persistent/acme/a/t/partitions",
		"/admin/v2/namespaces/acme/a/topics",
		"/admin/v2/schemas/acme/a/t/schema",
	} {
		for range 3 {
			if d := e.Route(limited, "GET", mustURL(t, path)); d.Outcome == Forward {
				t.Errorf("GET %s over the role's lookup rate: forwarded (the binary form of the same request is answered TooManyRequests)", path)
				break
			}
		}
	}
}

// The SNI plane's relays cannot be read, so the edge lets them through only while no policy
// is in force.
func TestOpaqueRelaysOnlyWithoutPolicy(t *testing.T) {
	if d := New(Config{}).Opaque(); d.Outcome != Forward {
		t.Fatalf("without a policy: %v, want forward", d.Outcome)
	}
	if d := newTestEdge(t, testPolicy).Opaque(); d.Outcome != Close || d.Reason != ReasonOpaque {
		t.Fatalf("with a policy: %v %s, want close %s", d.Outcome, d.Reason, ReasonOpaque)
	}
}
