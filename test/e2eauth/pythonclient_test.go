package e2eauth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// The Python client (pulsar-client) with a token (AuthenticationToken) through the
// authenticating proxy. Its virtualenv is prepared by the first test that needs it.
var (
	pyOnce      sync.Once
	pyClient    *rig.PyClient
	pyClientErr error
)

// needPython returns the Python client or ends the test: a skip that names what is missing
// outside CI, a failure on CI or when the install itself failed.
func needPython(t *testing.T) *rig.PyClient {
	t.Helper()
	pyOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		pyClient, pyClientErr = rig.PythonClient(ctx)
	})
	rig.Need(t, "the Python client", pyClientErr)
	return pyClient
}

// pyTokenFile writes role's token to a file for pyclient.py (a token in argv shows in ps).
func pyTokenFile(t *testing.T, role string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), role+".token")
	if err := os.WriteFile(f, []byte(mustToken(role, 0)), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPythonClientWithToken: alice's Python client authenticates to the proxy with her token
// and produces and consumes through it; bob's is refused on a namespace only alice is granted.
func TestPythonClientWithToken(t *testing.T) {
	py := needPython(t)
	p := startProxy(t, allowAll, "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	s, stderr, err := py.Run(ctx, "--url", p.PulsarURL, "--topic", uniqueTopic(nsShared, "py"), "--count", "500",
		"--token-file", pyTokenFile(t, "alice"))
	if err != nil || s.Received != 500 {
		t.Fatalf("alice's Python client: %v (received %d of 500)\nclient log tail:\n%s", err, s.Received, pyLogTail(stderr, 3000))
	}

	s, stderr, err = py.Run(ctx, "--url", p.PulsarURL, "--topic", uniqueTopic(nsAliceOnly, "py"), "--count", "1",
		"--token-file", pyTokenFile(t, "bob"), "--operation-timeout", "10")
	if err == nil || !strings.Contains(s.Error+string(stderr), "Authoriz") {
		t.Fatalf("bob's Python client on %s: err = %v, summary error %q; want an authorization refusal\n%s",
			nsAliceOnly, err, s.Error, pyLogTail(stderr, 3000))
	}
	t.Logf("bob refused: %s", s.Error)
}

func pyLogTail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }
