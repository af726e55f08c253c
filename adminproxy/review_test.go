package adminproxy

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Hostile review (attack-review branch): tests that fail on the code as reviewed.

// TestReviewCompressedTopicListIsNotFiltered: a Pulsar broker's web server compresses its
// answers when the request accepts gzip (GzipHandler, on by default:
// httpServerGzipCompressionExcludedPaths), and the proxy forwards the client's
// Accept-Encoding. Go's HTTP client (pulsarctl, the Go admin libraries, this test's) always
// sends "Accept-Encoding: gzip", so every namespace topic list such a client asks through a
// proxy with a policy comes back compressed, cannot be read to filter, and is answered 502:
// under a policy, listing topics is broken for those tools (it fails closed: nothing hidden
// leaks). Fix: drop Accept-Encoding from requests whose answer the edge filters (or decode
// gzip before filtering).
func TestReviewCompressedTopicListIsNotFiltered(t *testing.T) {
	brk := newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		list := `["persistent://acme/alice/a","persistent://acme/bob/secret"]`
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Write([]byte(list))
			return
		}
		w.Header().Set("Content-Encoding", "gzip") // as Jetty's GzipHandler answers
		zw := gzip.NewWriter(w)
		zw.Write([]byte(list))
		zw.Close()
	})
	tp, _ := policyProxy(t, brk)
	code, body, _ := tp.do(t, "GET", "/admin/v2/namespaces/acme/alice/topics", nil, "Authorization", "Bearer role:alice")
	var names []string
	if err := json.Unmarshal([]byte(body), &names); code != http.StatusOK || err != nil {
		t.Fatalf("a Go client's topic list of its own namespace: %d %s", code, body)
	}
	if len(names) != 1 || names[0] != "persistent://acme/alice/a" {
		t.Fatalf("alice sees %v", names)
	}
}
