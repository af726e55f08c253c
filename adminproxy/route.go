package adminproxy

import (
	"errors"
	"sort"
	"strings"
)

// route is what the proxy makes of a request path: whether it proxies it, where to, and the
// metric label it counts under.
type route struct {
	label   string // bounded: /admin/v2/persistent, /lookup/v2, /admin/v3/functions, ...
	workers bool   // the Functions worker API
}

// resources are the admin API's top-level resources that get a label of their own; any other
// is counted as ".../other", so a client cannot grow the label set.
var resources = map[string]bool{
	"bookies": true, "broker-stats": true, "brokers": true, "clusters": true, "namespaces": true,
	"non-persistent": true, "packages": true, "persistent": true, "properties": true,
	"resource-quotas": true, "resourcegroups": true, "schemas": true, "tenants": true,
	"transactions": true, "functions": true, "sources": true, "sinks": true, "worker": true,
	"worker-stats": true, "topics": true,
}

// workerPrefixes are the path segments (after /admin/v3/, /admin/v2/ or /admin/) that belong
// to the Functions worker's REST API, matched as prefixes as Pulsar's proxy matches them
// (function, functions, source, sources, sink, sinks, worker, worker-stats).
var workerPrefixes = []string{"function", "source", "sink", "worker"}

var (
	errNotProxied = errors.New("not an admin API path")
	errBadPath    = errors.New("path is not in canonical form")
)

// routeLabels are every label classify gives a proxied path, sorted: the series of the admin
// API's metrics made at start.
func routeLabels() []string {
	out := []string{"/topics", "/lookup/v2", "/lookup/other"}
	for _, v := range []string{"", "/v2", "/v3"} {
		out = append(out, "/admin"+v+"/other")
		for r := range resources {
			out = append(out, "/admin"+v+"/"+r)
		}
	}
	sort.Strings(out)
	return out
}

// classify decides what to do with a request path (already percent-decoded, as
// http.Request.URL.Path is). Only /admin/..., /lookup/... and /topics/... (the REST producer)
// are proxied (errNotProxied for anything else). A path that a server could read as another path is refused (errBadPath):
// "." or ".." segments, empty segments ("//") except a trailing slash, backslashes and control
// characters; encoded spellings (%2e%2e, %2f) are refused too, since the decoded path is
// checked. The raw path is sent to brokers as the client wrote it.
func classify(path string) (route, error) {
	if !strings.HasPrefix(path, "/admin/") && !strings.HasPrefix(path, "/lookup/") && !strings.HasPrefix(path, "/topics/") &&
		path != "/admin" && path != "/lookup" {
		return route{}, errNotProxied
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, s := range segs {
		if s == "." || s == ".." || (s == "" && i != len(segs)-1) {
			return route{}, errBadPath
		}
		for j := 0; j < len(s); j++ {
			// A ';' starts a JAX-RS matrix parameter, which a broker reads apart from the name:
			// the proxy would decide on a name the broker does not use.
			if c := s[j]; c < 0x20 || c == 0x7f || c == '\\' || c == ';' {
				return route{}, errBadPath
			}
		}
	}
	if segs[0] == "topics" {
		return route{label: "/topics"}, nil
	}
	if segs[0] == "lookup" {
		if len(segs) > 1 && segs[1] == "v2" {
			return route{label: "/lookup/v2"}, nil
		}
		return route{label: "/lookup/other"}, nil
	}
	version, rest := "", segs[1:]
	if len(rest) > 0 && (rest[0] == "v2" || rest[0] == "v3") {
		version, rest = "/"+rest[0], rest[1:]
	}
	r := route{label: "/admin" + version + "/other"}
	if len(rest) == 0 {
		return r, nil
	}
	if resources[rest[0]] {
		r.label = "/admin" + version + "/" + rest[0]
	}
	for _, p := range workerPrefixes {
		if strings.HasPrefix(rest[0], p) {
			r.workers = true
		}
	}
	return r, nil
}
