package edge

import (
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// The routes of Pulsar 4.0's REST API a role other than a superuser may use through the
// proxy, each with the action it needs and on what. First match wins, so the specific
// entries of a group come before its catch-alls. What is not here (clusters, brokers,
// bookies, workers, resource quotas and groups, transactions, tenants' creation and
// listing, v1 paths with a cluster segment, the Functions API's cluster-wide routes) is for
// superusers only.
//
// The groups:
//   - /lookup and what only reads a topic's metadata or statistics: lookup on the topic;
//   - what reads messages or moves or removes cursors: consume on the topic (or on the whole
//     namespace, for a namespace's backlog and subscriptions);
//   - the REST producer: produce on the topic;
//   - what creates, deletes or changes a topic, a namespace or their policies, grants, and the
//     Functions, sources, sinks and packages of a namespace: admin;
//   - a namespace's topic list: lookup in the namespace, its answer filtered name by name.
var routeTable = buildRoutes(
	// Lookups, counted by the role's lookup rate (as are a topic's partitions, a namespace's
	// topic list and a schema, below: what clients with an http:// service URL ask for).
	discovery(r("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", authz.ActionLookup, onTopic)),
	discovery(r("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", authz.ActionLookup, onTopic)),

	// The REST producer.
	r("POST", "/topics/{domain}/{tenant}/{namespace}/{topic}", authz.ActionProduce, onTopic),
	r("POST", "/topics/{domain}/{tenant}/{namespace}/{topic}/partitions/{partition}", authz.ActionProduce, onTopic),

	// Routes whose shape a catch-all below would take for a namespace's or a topic's, but
	// which span tenants or the cluster.
	superusers("GET", "/admin/v2/namespaces/{cluster}/antiAffinity/{group}"),
	superusers("POST", "/admin/v3/functions/builtins/reload"),
	superusers("GET", "/admin/v3/functions/builtins/**"),
	superusers("PUT", "/admin/v3/functions/leader/**"),
	superusers("GET", "/admin/v3/sources/builtinsources/**"),
	superusers("GET", "/admin/v3/sinks/builtinsinks/**"),
	superusers("GET", "/admin/v3/source/builtinsources/**"),
	superusers("GET", "/admin/v3/sink/builtinsinks/**"),

	// A namespace's topics, filtered.
	lists("GET", "/admin/v2/{domain}/{tenant}/{namespace}"),
	lists("GET", "/admin/v2/{domain}/{tenant}/{namespace}/partitioned"),
	discovery(lists("GET", "/admin/v2/namespaces/{tenant}/{namespace}/topics")),
	lists("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{bundle}"), // a bundle's topics

	// Topics: reading messages and moving cursors.
	topic("GET", "subscription/{subscription}/position/{position}", authz.ActionConsume),
	topic("GET", "examinemessage", authz.ActionConsume),
	topic("GET", "ledger/{ledger}/entry/{entry}", authz.ActionConsume),
	topic("GET", "messageid/{timestamp}", authz.ActionConsume),
	topic("PUT", "subscription/{subscription}", authz.ActionConsume),
	topic("DELETE", "subscription/{subscription}", authz.ActionConsume),
	topic("POST", "subscription/{subscription}/skip_all", authz.ActionConsume),
	topic("POST", "subscription/{subscription}/skip/{count}", authz.ActionConsume),
	topic("POST", "subscription/{subscription}/expireMessages", authz.ActionConsume),
	topic("POST", "subscription/{subscription}/expireMessages/{seconds}", authz.ActionConsume),
	topic("POST", "all_subscription/expireMessages/{seconds}", authz.ActionConsume),
	topic("POST", "subscription/{subscription}/resetcursor", authz.ActionConsume),
	topic("POST", "subscription/{subscription}/resetcursor/{timestamp}", authz.ActionConsume),
	topic("POST", "subscription/{subscription}/analyzeBacklog", authz.ActionConsume),
	topic("PUT", "subscription/{subscription}/properties", authz.ActionConsume),
	topic("GET", "subscription/{subscription}/properties", authz.ActionLookup),
	topic("GET", "subscription/{subscription}/replicatedSubscriptionStatus", authz.ActionLookup),
	topic("POST", "subscription/{subscription}/replicatedSubscriptionStatus", authz.ActionAdmin),

	// Topics: grants, and offload settings (which may hold the storage's credentials), are
	// the admin's to see and change.
	topic("GET", "permissions", authz.ActionAdmin),
	topic("GET", "offloadPolicies", authz.ActionAdmin),
	topic("POST", "permissions/{role}", authz.ActionAdmin),
	topic("DELETE", "permissions/{role}", authz.ActionAdmin),

	// Topics: the topic itself, its partitions, metadata and statistics.
	topicRoot("PUT", authz.ActionAdmin),
	topicRoot("DELETE", authz.ActionAdmin),
	discovery(topic("GET", "partitions", authz.ActionLookup)),
	topic("PUT", "backlogSize", authz.ActionLookup), // an estimate, asked with a message id in the body
	topic("GET", "{property}", authz.ActionLookup),  // stats, internalStats, lastMessageId, subscriptions, and every topic policy
	topic("GET", "{property}/{detail}", authz.ActionLookup),
	topic("PUT", "**", authz.ActionAdmin),
	topic("POST", "**", authz.ActionAdmin),
	topic("DELETE", "**", authz.ActionAdmin),

	// Namespaces: a namespace's backlog and subscriptions are its consumers'.
	ns("POST", "clearBacklog", authz.ActionConsume, onNamespace),
	ns("POST", "clearBacklog/{subscription}", authz.ActionConsume, onNamespace),
	ns("POST", "{bundle}/clearBacklog", authz.ActionConsume, onNamespace),
	ns("POST", "{bundle}/clearBacklog/{subscription}", authz.ActionConsume, onNamespace),
	ns("POST", "unsubscribe/{subscription}", authz.ActionConsume, onNamespace),
	ns("POST", "{bundle}/unsubscribe/{subscription}", authz.ActionConsume, onNamespace),
	// Grants, and the policies that hold them, are the admin's to see.
	ns("GET", "", authz.ActionAdmin, onNamespace),
	ns("GET", "permissions", authz.ActionAdmin, onNamespace),
	ns("GET", "permissions/**", authz.ActionAdmin, onNamespace),
	ns("GET", "offloadPolicies", authz.ActionAdmin, onNamespace),
	ns("GET", "scanOffloadedLedgers", authz.ActionAdmin, onNamespace), // reads the offload storage
	// A bundle's topics by name, with their hash positions: unfiltered, so the admin's.
	ns("GET", "{bundle}/topicHashPositions", authz.ActionAdmin, onNamespace),
	// A namespace is created in its tenant.
	ns("PUT", "", authz.ActionAdmin, onTenant),
	ns("DELETE", "", authz.ActionAdmin, onNamespace),
	ns("GET", "{policy}", authz.ActionLookup, inNamespace),
	ns("GET", "{policy}/{detail}", authz.ActionLookup, inNamespace),
	ns("PUT", "**", authz.ActionAdmin, onNamespace),
	ns("POST", "**", authz.ActionAdmin, onNamespace),
	ns("DELETE", "**", authz.ActionAdmin, onNamespace),
	// The namespaces of a tenant and its description.
	r("GET", "/admin/v2/namespaces/{tenant}", authz.ActionAdmin, onTenant),
	r("GET", "/admin/v2/tenants/{tenant}", authz.ActionAdmin, onTenant),

	// Schemas (a topic's without a domain: the broker reads it as persistent; and decodes it
	// twice, see topicOf).
	discovery(schema("GET", "schema", authz.ActionLookup)),
	discovery(schema("GET", "schema/{version}", authz.ActionLookup)),
	schema("GET", "schemas", authz.ActionLookup),
	schema("GET", "metadata", authz.ActionLookup),
	schema("POST", "compatibility", authz.ActionLookup),
	schema("POST", "version", authz.ActionLookup),
	schema("POST", "schema", authz.ActionAdmin),
	schema("DELETE", "schema", authz.ActionAdmin),

	// A namespace's Functions, sources, sinks and packages.
	nsAPI("/admin/v3/functions/{tenant}/{namespace}"),
	nsAPI("/admin/v3/sources/{tenant}/{namespace}"),
	nsAPI("/admin/v3/source/{tenant}/{namespace}"), // the deprecated singular paths
	nsAPI("/admin/v3/sinks/{tenant}/{namespace}"),
	nsAPI("/admin/v3/sink/{tenant}/{namespace}"),

	// A topic's transaction statistics.
	r("GET", "/admin/v3/transactions/transactionBufferStats/{tenant}/{namespace}/{topic}", authz.ActionLookup, onTopic),
	r("GET", "/admin/v3/transactions/transactionBufferInternalStats/{tenant}/{namespace}/{topic}", authz.ActionLookup, onTopic),
	r("GET", "/admin/v3/transactions/transactionInBufferStats/{tenant}/{namespace}/{topic}/**", authz.ActionLookup, onTopic),
	r("GET", "/admin/v3/transactions/pendingAckStats/{tenant}/{namespace}/{topic}/**", authz.ActionLookup, onTopic),
	r("GET", "/admin/v3/transactions/pendingAckInternalStats/{tenant}/{namespace}/{topic}/**", authz.ActionLookup, onTopic),
	r("GET", "/admin/v3/transactions/transactionInPendingAckStats/{tenant}/{namespace}/{topic}/**", authz.ActionLookup, onTopic),
	r("GET", "/admin/v3/transactions/positionStatsInPendingAck/{tenant}/{namespace}/{topic}/**", authz.ActionLookup, onTopic),
	nsAPI("/admin/v2/functions/{tenant}/{namespace}"),
	nsAPI("/admin/v3/packages/{type}/{tenant}/{namespace}"),

	// Tenants' life, the cluster, its brokers and workers, transactions, the v1 API (its names
	// carry a cluster, which no rule can describe): superusers only, named so that a route
	// no entry describes stands out (KnownRoute).
	superusers("GET", "/admin/v2/tenants"),
	superusers("PUT", "/admin/v2/tenants/{tenant}"),
	superusers("POST", "/admin/v2/tenants/{tenant}"),
	superusers("DELETE", "/admin/v2/tenants/{tenant}"),
	cluster("/admin/v2/clusters"), cluster("/admin/v2/brokers"), cluster("/admin/v2/broker-stats"),
	cluster("/admin/v2/bookies"), cluster("/admin/v2/resource-quotas"), cluster("/admin/v2/resourcegroups"),
	cluster("/admin/v2/worker"), cluster("/admin/v2/worker-stats"), cluster("/admin/v3/transactions"),
	cluster("/admin/v3/functions/connectors"), cluster("/admin/v3/sources/builtinsources"), cluster("/admin/v3/sinks/builtinsinks"),
	cluster("/admin/persistent"), cluster("/admin/non-persistent"), cluster("/admin/namespaces"), // v1
	cluster("/admin/properties"), cluster("/admin/schemas"), cluster("/admin/clusters"),
	cluster("/admin/brokers"), cluster("/admin/broker-stats"), cluster("/admin/resource-quotas"),
	cluster("/lookup/v2/destination"),
)

// superusers is a route for superusers only, named because a catch-all would take it.
func superusers(method, path string) []route {
	return r(method, path, "", forSuperusers)
}

// cluster is every route under prefix, for superusers only.
func cluster(prefix string) []route {
	var out []route
	for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
		out = append(out, superusers(m, prefix)...)
		out = append(out, superusers(m, prefix+"/**")...)
	}
	return out
}

func r(method, path string, a authz.Action, s scope) []route {
	return []route{{method: method, path: strings.Split(strings.TrimPrefix(path, "/"), "/"), action: a, scope: s}}
}

// lists is a GET of a namespace's topic names.
func lists(method, path string) []route {
	rt := r(method, path, authz.ActionLookup, inNamespace)
	rt[0].lists = true
	return rt
}

// topic is a route under a topic of either domain (/admin/v2/{domain}/...), by its suffix.
func topic(method, suffix string, a authz.Action) []route {
	return r(method, "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/"+suffix, a, onTopic)
}

// discovery marks routes the role's lookup rate counts.
func discovery(rt []route) []route {
	for i := range rt {
		rt[i].discovery = true
	}
	return rt
}

// schema is a route of a topic's schema, by its suffix.
func schema(method, suffix string, a authz.Action) []route {
	rt := r(method, "/admin/v2/schemas/{tenant}/{namespace}/{topic}/"+suffix, a, onTopic)
	rt[0].decodedTwice = true
	return rt
}

// topicRoot is the topic itself.
func topicRoot(method string, a authz.Action) []route {
	return r(method, "/admin/v2/{domain}/{tenant}/{namespace}/{topic}", a, onTopic)
}

// ns is a route under a namespace, by its suffix ("" for the namespace itself).
func ns(method, suffix string, a authz.Action, s scope) []route {
	path := "/admin/v2/namespaces/{tenant}/{namespace}"
	if suffix != "" {
		path += "/" + suffix
	}
	return r(method, path, a, s)
}

// nsAPI is every route of a namespace's part of an API (Functions, packages): admin on the
// namespace.
func nsAPI(prefix string) []route {
	var out []route
	for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
		out = append(out, r(m, prefix, authz.ActionAdmin, onNamespace)...)
		out = append(out, r(m, prefix+"/**", authz.ActionAdmin, onNamespace)...)
	}
	return out
}

func buildRoutes(groups ...[]route) []route {
	var out []route
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
