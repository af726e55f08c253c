// Package accesslog reads the proxy's admin access log for end-to-end tests.
package accesslog

import (
	"bufio"
	"encoding/json"
	"net/url"
	"os"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
)

// UnknownRoutes lists, as "METHOD path", the admin requests of the proxy's log (one JSON
// object per line) that no entry of the edge's route table describes: a route the test's
// clients use that nobody decided on.
func UnknownRoutes(logPath string) ([]string, int, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var unknown []string
	seen := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e struct{ Message, Method, Path string }
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Message != "admin request" {
			continue
		}
		seen++
		if !edge.KnownRoute(e.Method, &url.URL{Path: e.Path}) {
			unknown = append(unknown, e.Method+" "+e.Path)
		}
	}
	return unknown, seen, sc.Err()
}

// RequireKnownRoutes fails t, once it is over, if the proxy logging to logPath served an admin
// request whose route the edge's table has no entry for (or none at all: nothing checked).
func RequireKnownRoutes(t testing.TB, logPath string) {
	t.Cleanup(func() {
		unknown, seen, err := UnknownRoutes(logPath)
		switch {
		case err != nil:
			t.Errorf("reading the access log: %v", err)
		case seen == 0:
			t.Errorf("the access log has no admin request: nothing was checked")
		case len(unknown) > 0:
			t.Errorf("routes with no entry in the edge's table (edge/routetable.go): %v", unknown)
		}
	})
}
