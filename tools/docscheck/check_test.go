package docscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Anchors are GitHub's: punctuation dropped, spaces to '-', code spans' text kept.
func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"TLS and the PROXY protocol":  "tls-and-the-proxy-protocol",
		"Moving from Apache's proxy":  "moving-from-apaches-proxy",
		"`check-config`: exit codes":  "check-config-exit-codes",
		"Why — and when":              "why--and-when",
		"session.maxConnectionsPerIP": "sessionmaxconnectionsperip",
	} {
		src := "# " + in + "\n"
		if got := Parse("x.md", []byte(src)).Headings[0].Slug; got != want {
			t.Errorf("anchor of %q = %q, want %q", in, got, want)
		}
	}
}

// A repeated heading is numbered; a block knows the headings it sits under.
func TestParseAnchorsAndBlocks(t *testing.T) {
	src := "# Top\n\n## Usage\n\n```sh\nmake demo  # the demo\n\nmake test\n```\n\n## Usage\n\n### Deeper\n\n```yaml\na: 1\n```\n"
	p := Parse("x.md", []byte(src))
	for _, a := range []string{"top", "usage", "usage-1", "deeper"} {
		if !p.Anchors[a] {
			t.Errorf("no anchor %q in %v", a, p.Anchors)
		}
	}
	if got := Commands(p, "usage"); !slices.Equal(got, []string{"make demo", "make test"}) {
		t.Errorf("commands under usage: %q", got)
	}
	if got := Commands(p, "usage-1"); got != nil {
		t.Errorf("commands under usage-1: %q, want none (its block is yaml)", got)
	}
	b := FirstBlock(p, "yaml")
	if b == nil || b.Text != "a: 1\n" || !slices.Equal(b.Under, []string{"top", "usage-1", "deeper"}) {
		t.Errorf("yaml block: %+v", b)
	}
}

// A broken link, a missing anchor, an anchor into a file that has none, an absolute path and
// a path out of the checkout are each reported; good links, links with a scheme and a
// pending page that does not exist yet are not.
func TestCheckLinksFindsBroken(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "docs/a.md", "# A\n\n## Limits\n")
	write(t, dir, "config.yaml", "x: 1\n")
	write(t, dir, "README.md", strings.Join([]string{
		"# Readme",
		"[ok](docs/a.md) [ok](docs/a.md#limits) [ok](#readme) [ok](config.yaml) [ok](docs)",
		"[web](https://example.com/x) [pending](docs/install.md) ![img](docs/a.md)",
		"[missing](docs/b.md) [anchor](docs/a.md#nope) [here](#nope) [into](config.yaml#x)",
		"[abs](/docs/a.md) [out](../x.md) [pending anchor](docs/install.md#x)",
	}, "\n\n"))
	r := NewRepo(dir)
	problems, err := r.CheckLinks("README.md", map[string]string{"docs/install.md": "later"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"docs/b.md does not exist", "docs/a.md has no heading with the anchor #nope",
		"README.md has no heading with the anchor #nope", "config.yaml, which is not a Markdown page",
		"absolute path", "out of the repository", "docs/install.md does not exist"}
	if len(problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
			t.Errorf("no problem says %q:\n%s", w, strings.Join(problems, "\n"))
		}
	}
}

// make -n runs a target that exists, and refuses one that does not, one declared .PHONY
// without a rule, or a command not make's.
func TestDryRun(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "Makefile", ".PHONY: demo test\ndemo:\n\t@echo demo\n")
	if err := DryRun(dir, "make demo"); err != nil {
		t.Errorf("make demo: %v", err)
	}
	for _, bad := range []string{"make nope", "make test", "go test ./...", "make"} {
		if err := DryRun(dir, bad); err == nil {
			t.Errorf("%q passed", bad)
		}
	}
}

// Names are taken from the product's source and the rule file, and the pages' ones are
// compared with them.
func TestNames(t *testing.T) {
	known := map[string]bool{"pulsar_proxy_lookup_seconds": true, "pulsar_proxy_discovery_stale": true}
	src := []byte("`pulsar_proxy_lookup_seconds_bucket`, pulsar_proxy_discovery_*, pulsar_proxy_nope_total, pulsar_proxy_x_*")
	if got := UnknownMetrics(src, known); !slices.Equal(got, []string{"pulsar_proxy_nope_total", "pulsar_proxy_x_"}) {
		t.Errorf("unknown metrics: %q", got)
	}
	keys, err := ConfigKeys([]byte("session:\n  passthrough: true\nbroker:\n  tls:\n    enabled: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := Parse("x.md", []byte("`session.passthrough: false` `broker.tls` `broker.tls.enabled` `session.nope` `tls.crt` `log`\n"))
	var bad []string
	for _, s := range UnknownConfigKeys(p, keys) {
		bad = append(bad, s.Text)
	}
	if !slices.Equal(bad, []string{"session.nope", "tls.crt"}) {
		t.Errorf("unknown config keys: %q", bad)
	}
	alerts, err := AlertNames([]byte("groups:\n- name: g\n  rules:\n  - alert: PulsarProxyDown\n    expr: up == 0\n  - record: x\n    expr: y\n"))
	if err != nil || len(alerts) != 1 || !alerts["PulsarProxyDown"] {
		t.Errorf("alerts: %v %v", alerts, err)
	}
}

func write(t *testing.T, dir, rel, text string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
