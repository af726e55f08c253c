package authz

import (
	"context"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

const testPolicy = `
superUserRoles: [admin]
rules:
  - roles: [alice, "team-*"]
    resources: ["public/default/*"]
    actions: [lookup, produce, consume]
  - roles: [bob]
    resources: ["persistent://acme/ns/a-*"]
    actions: [lookup, consume]
`

func TestPolicyAllowed(t *testing.T) {
	p, err := ParsePolicy([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		role   string
		action Action
		topic  string
		want   bool
	}{
		{"admin", ActionProduce, "persistent://x/y/z", true},
		{"alice", ActionProduce, "persistent://public/default/t", true},
		{"alice", ActionProduce, "t", true},
		{"alice", ActionConsume, "non-persistent://public/default/t", true},
		{"team-blue", ActionLookup, "public/default/t", true},
		{"alice", ActionProduce, "persistent://public/other/t", false},
		{"mallory", ActionLookup, "persistent://public/default/t", false},
		{"bob", ActionConsume, "persistent://acme/ns/a-1", true},
		{"bob", ActionConsume, "persistent://acme/ns/a-1-partition-0", true},
		{"bob", ActionConsume, "non-persistent://acme/ns/a-1", false},
		{"bob", ActionProduce, "persistent://acme/ns/a-1", false},
		{"bob", ActionLookup, "persistent://acme/ns/b-1", false},
		{"bob", ActionLookup, "persistent://acme/ns/a-1/extra", false},
		{"bob", ActionLookup, "garbage://acme/ns/a-1", false},
	}
	for _, c := range cases {
		if got := p.Allowed(c.role, c.action, c.topic); got != c.want {
			t.Errorf("%s %s %s = %v, want %v", c.role, c.action, c.topic, got, c.want)
		}
	}
}

func TestParsePolicyRefusesMistakes(t *testing.T) {
	for _, bad := range []string{
		"rules: [{roles: [a], resources: [t/n/x], actions: [write]}]",
		"rules: [{roles: [a], resources: [t/n], actions: [lookup]}]",
		"rules: [{roles: [a], resources: [\"kafka://t/n/x\"], actions: [lookup]}]",
		"rules: [{roles: [\"[\"], resources: [t/n/x], actions: [lookup]}]",
		"rules: [{roles: [a], actions: [lookup]}]",
		"superusers: [a]",
		"rules: {",
	} {
		if _, err := ParsePolicy([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestPolicyStoreReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(path, []byte(testPolicy), 0o600)
	reg := promtest.New()
	s, err := NewPolicyStore(path, NewMetrics(reg), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if !s.Policy().Allowed("alice", ActionProduce, "t") {
		t.Fatal("initial policy not in force")
	}
	if changed, err := s.reload(); changed || err != nil {
		t.Fatalf("unchanged file reloaded: %v %v", changed, err)
	}
	os.WriteFile(path, []byte("rules: ["), 0o600)
	if _, err := s.reload(); err == nil {
		t.Fatal("broken policy accepted")
	}
	if !s.Policy().Allowed("alice", ActionProduce, "t") {
		t.Fatal("broken policy replaced the one in force")
	}
	os.WriteFile(path, []byte("superUserRoles: [bob]\n"), 0o600)
	if changed, err := s.reload(); !changed || err != nil {
		t.Fatalf("new policy: %v %v", changed, err)
	}
	if s.Policy().Allowed("alice", ActionProduce, "t") || !s.Policy().Allowed("bob", ActionProduce, "t") {
		t.Fatal("new policy not in force")
	}
	if got := reg.Value(t, "pulsar_proxy_policy_reloads_total", "result", "error"); got != 1 {
		t.Fatalf("error reloads %v", got)
	}
	if _, err := NewPolicyStore(filepath.Join(t.TempDir(), "missing"), nil, zerolog.Nop()); err == nil {
		t.Fatal("missing policy file accepted at start")
	}
}

func TestPolicyStoreWatchReloadsOnSignal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(path, []byte(testPolicy), 0o600)
	s, err := NewPolicyStore(path, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() { s.Watch(ctx, time.Hour, hup); close(done) }()
	os.WriteFile(path, []byte("superUserRoles: [bob]\n"), 0o600)
	hup <- syscall.SIGHUP
	hup <- syscall.SIGHUP // the first has been handled once the second is taken
	cancel()
	<-done
	if !s.Policy().IsSuperUser("bob") {
		t.Fatal("SIGHUP did not reload the policy")
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExamplePolicyParses(t *testing.T) {
	b, err := os.ReadFile("../authz-policy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePolicy(b)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allowed("analytics-eu", ActionConsume, "persistent://acme/orders/o-partition-1") || p.Allowed("analytics-eu", ActionProduce, "acme/orders/o") {
		t.Fatal("the example does not mean what its comments say")
	}
}

func TestPolicyLimits(t *testing.T) {
	p, err := ParsePolicy([]byte(`
rules: [{roles: ["*"], resources: ["*/*/*"], actions: [lookup]}]
limits:
  - {roles: [carol], maxConnections: 2, lookupsPerSecond: 1}
  - {roles: ["team-*", carol], publishBytesPerSecond: 1000}
`))
	if err != nil {
		t.Fatal(err)
	}
	if l := p.LimitFor("carol"); l.MaxConnections != 2 || l.LookupsPerSecond != 1 || l.PublishBytesPerSecond != 0 {
		t.Fatalf("carol: %+v (the first matching limit applies)", l)
	}
	if l := p.LimitFor("team-a"); l.PublishBytesPerSecond != 1000 || l.MaxConnections != 0 {
		t.Fatalf("team-a: %+v", l)
	}
	if l := p.LimitFor("alice"); l.Limited() {
		t.Fatalf("alice: %+v, want no limit", l)
	}
	for _, bad := range []string{
		"limits: [{maxConnections: 1}]",
		"limits: [{roles: [a]}]",
		"limits: [{roles: [a], maxConnections: -1}]",
		"limits: [{roles: [\"[\"], maxConnections: 1}]",
		"limits: [{roles: [a], connections: 1}]",
	} {
		if _, err := ParsePolicy([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
