package adminproxy

import (
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
)

// FuzzClassify: whatever a client sends, a path the proxy forwards is canonical (no "." or
// ".." segment, no empty segment but a trailing one, no backslash or control character) and
// stays under /admin or /lookup once cleaned; the worker API is chosen only under /admin.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"/admin/v2/tenants", "/admin/v2/../../metrics", "/admin/v2/%2e%2e/x", "/lookup/v2/topic/persistent/a/b/c",
		"/admin/v3/functions/a/b/f/0/status", "/admin//x", "/admin/v2/tenants/", "/admin", "/lookupx", "/admin/v2/a%5cb",
		"/admin/v2/persistent%2F..%2F..%2Fworker", "/metrics", "/admin/v2/worker-stats/functionsmetrics",
	} {
		f.Add(s)
	}
	labels := routeLabels()
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			return
		}
		p := u.Path
		r, err := classify(p)
		if err != nil {
			return
		}
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && clean != "/" {
			clean += "/"
		}
		if clean != p {
			t.Fatalf("forwarded %q (decoded %q), which cleans to %q", raw, p, clean)
		}
		if strings.ContainsAny(p, "\\\x00\r\n\t") {
			t.Fatalf("forwarded %q with a backslash or control character", p)
		}
		if !strings.HasPrefix(clean, "/admin") && !strings.HasPrefix(clean, "/lookup") {
			t.Fatalf("forwarded %q outside /admin and /lookup", p)
		}
		if r.workers && !strings.HasPrefix(p, "/admin/") {
			t.Fatalf("%q sent to the workers", p)
		}
		if r.label == "" || strings.Count(r.label, "/") > 3 || !slices.Contains(labels, r.label) {
			t.Fatalf("label %q for %q (not among the series made at start)", r.label, p)
		}
	})
}
