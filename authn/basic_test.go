package authn

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
)

// pulsar-client-go's integration tests' credentials file (integration-tests/conf/.htpasswd),
// whose password its tests send (NewAuthenticationBasic("admin", "123456")).
const clientGoHtpasswd = "admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.\n"

func basicFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), ".htpasswd")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestBasicAuthenticatesAsPulsarDoes(t *testing.T) {
	reg := promtest.New()
	p, err := NewBasicProvider(basicFile(t, clientGoHtpasswd+"bob:$apr1$xyz\n"), NewBasicMetrics(reg), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if id, err := p.Authenticate(Credentials{Method: "basic", Data: []byte("admin:123456")}); err != nil || id.Role != "admin" || id.Method != "basic" {
		t.Fatalf("admin:123456: %+v %v", id, err)
	}
	// Java's split drops trailing empty parts: "admin:123456:" is two parts there too.
	if _, err := p.Authenticate(Credentials{Method: "basic", Data: []byte("admin:123456:")}); err != nil {
		t.Errorf("admin:123456: (a trailing ':'): %v", err)
	}
	for data, reason := range map[string]Reason{
		"admin:wrong":     ReasonBadCredentials,
		"nobody:123456":   ReasonBadCredentials,
		"bob:x":           ReasonBadCredentials, // a hash Pulsar's check rejects (not four '$' parts)
		"admin":           ReasonMalformed,
		"admin:12:3456":   ReasonMalformed,
		"":                ReasonMalformed,
		"admin:123456\n:": ReasonBadCredentials, // two parts, as Java splits it
	} {
		_, err := p.Authenticate(Credentials{Method: "basic", Data: []byte(data)})
		if ReasonOf(err) != reason {
			t.Errorf("%q: %v, want reason %s", data, err, reason)
		}
	}
	if n := reg.Value(t, "pulsar_proxy_basic_auth_users"); n != 2 {
		t.Errorf("users gauge %v, want 2", n)
	}
}

func TestBasicFileFormat(t *testing.T) {
	for name, content := range map[string]string{
		"blank line":  "admin:$apr1$a$b\n\nbob:$apr1$a$b\n",
		"three parts": "admin:$apr1$a$b:x\n",
		"no colon":    "admin\n",
	} {
		if _, err := NewBasicProvider(basicFile(t, content), nil, zerolog.Nop()); err == nil {
			t.Errorf("%s: loaded; Pulsar refuses such a file", name)
		}
	}
	if _, err := NewBasicProvider(filepath.Join(t.TempDir(), "missing"), nil, zerolog.Nop()); err == nil {
		t.Error("a missing file loaded")
	}
}

// A changed file is taken at the next reload; a broken one is refused and the users in force
// stay, counted as an error.
func TestBasicReload(t *testing.T) {
	reg := promtest.New()
	f := basicFile(t, clientGoHtpasswd)
	p, err := NewBasicProvider(f, NewBasicMetrics(reg), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(f, []byte("broken\n"), 0o600)
	if _, err := p.reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	if _, err := p.Authenticate(Credentials{Method: "basic", Data: []byte("admin:123456")}); err != nil {
		t.Errorf("after a failed reload: %v, want the users in force kept", err)
	}
	os.WriteFile(f, []byte("other:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.\n"), 0o600)
	if changed, err := p.reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if _, err := p.Authenticate(Credentials{Method: "basic", Data: []byte("admin:123456")}); ReasonOf(err) != ReasonBadCredentials {
		t.Errorf("a removed user: %v", err)
	}
	if id, err := p.Authenticate(Credentials{Method: "basic", Data: []byte("other:123456")}); err != nil || id.Role != "other" {
		t.Errorf("the new user: %v %v", id, err)
	}
	if ok, bad := reg.Value(t, "pulsar_proxy_basic_auth_reloads_total", "result", "ok"), reg.Value(t, "pulsar_proxy_basic_auth_reloads_total", "result", "error"); ok != 2 || bad != 1 {
		t.Errorf("reloads ok %v error %v, want 2 and 1", ok, bad)
	}
}
