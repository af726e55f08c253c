package docscheck

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The checkout, from this module's directory.
var root = filepath.Join("..", "..")

// pending are pages that another branch writes; a link to one is accepted while it does not
// exist yet, and checked as any other once it does.
var pending = map[string]string{}

// otherKeys are pages whose dotted names are not config.yaml keys: the Helm chart's values
// (`tls.enabled`), the code's identifiers (`session.open`).
var otherKeys = map[string]bool{"docs/helm.md": true, "docs/architecture.md": true}

// chartPages name the chart's values beside config.yaml keys: either is a known name there.
var chartPages = map[string]bool{"docs/install.md": true}

func operatorPages(t *testing.T) (*Repo, []string) {
	t.Helper()
	r := NewRepo(root)
	pages, err := r.OperatorPages()
	if err != nil {
		t.Fatal(err)
	}
	return r, pages
}

func page(t *testing.T, r *Repo, rel string) *Page {
	t.Helper()
	p, err := r.Page(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Every relative link of README.md, CONTRIBUTING.md and docs/*.md leads to a file of the
// checkout, and every anchor to a heading of its page.
func TestLinksResolve(t *testing.T) {
	r, pages := operatorPages(t)
	for _, rel := range pages {
		problems, err := r.CheckLinks(rel, pending)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
	for rel := range pending {
		if _, err := os.Stat(filepath.Join(root, rel)); err == nil {
			t.Logf("%s exists now: its entry in pending can go", rel)
		}
	}
}

// The README's quick start is exactly `make demo` and `make test`, and make runs both as
// written (-n: it reads the Makefile and plans the target without running it).
func TestQuickStartIsTheMakefiles(t *testing.T) {
	r := NewRepo(root)
	cmds := Commands(page(t, r, "README.md"), QuickStartAnchor)
	if want := []string{"make demo", "make test"}; !slices.Equal(cmds, want) {
		t.Fatalf("README.md's quick start runs %q, want exactly %q", cmds, want)
	}
	for _, c := range cmds {
		if err := DryRun(root, c); err != nil {
			t.Error(err)
		}
	}
}

// The README's configuration (its first yaml block) is short and one the proxy accepts:
// check-config of the binary built from this checkout passes it.
func TestReadmeConfigIsAccepted(t *testing.T) {
	r := NewRepo(root)
	b := FirstBlock(page(t, r, "README.md"), "yaml")
	if b == nil {
		t.Fatal("README.md has no yaml block: the configuration that reaches a cluster")
	}
	lines := 0
	for _, l := range strings.Split(b.Text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines++
		}
	}
	if lines > 12 {
		t.Errorf("README.md:%d: the configuration has %d lines; keep it to about ten", b.Line, lines)
	}
	bin, err := BuildProxy(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckConfig(bin, b.Text); err != nil {
		t.Errorf("README.md:%d: %v", b.Line, err)
	}
}

// The README is the operator's first page, not the manual.
func TestReadmeIsShort(t *testing.T) {
	if p := page(t, NewRepo(root), "README.md"); p.Lines > 250 {
		t.Errorf("README.md has %d lines, at most 250: the rest belongs in docs/", p.Lines)
	}
}

// Every metric the pages name is one the product defines.
func TestMetricNamesExist(t *testing.T) {
	known, err := ProductMetrics(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(known) < 20 {
		t.Fatalf("found %d metric names in the product's source; is the root right?", len(known))
	}
	_, pages := operatorPages(t)
	for _, rel := range pages {
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range UnknownMetrics(src, known) {
			t.Errorf("%s names %s, which the product does not define", rel, m)
		}
	}
}

// Every configuration key the pages name is in config.example.yaml (which a test of the
// product holds to the configuration itself).
func TestConfigKeysExist(t *testing.T) {
	example, err := os.ReadFile(filepath.Join(root, "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ConfigKeys(example)
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(root, "helm", "pulsar-proxy", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	chartKeys, err := ConfigKeys(values)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(chartKeys, keys)
	r, pages := operatorPages(t)
	for _, rel := range pages {
		if otherKeys[rel] {
			continue
		}
		known, of := keys, "config.example.yaml"
		if chartPages[rel] {
			known, of = chartKeys, "config.example.yaml nor of the chart's values.yaml"
		}
		for _, c := range UnknownConfigKeys(page(t, r, rel), known) {
			t.Errorf("%s:%d: `%s` is not a key of %s", rel, c.Line, c.Text, of)
		}
	}
}

// The operations page lists every alert of the shipped rule file, and no page names one
// that is not in it.
func TestAlertsDocumented(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(root, "helm", "pulsar-proxy", "files", "pulsar-proxy-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := AlertNames(rules)
	if err != nil {
		t.Fatal(err)
	}
	r, pages := operatorPages(t)
	for _, rel := range pages {
		for name := range AlertsNamed(page(t, r, rel)) {
			if !alerts[name] {
				t.Errorf("%s names the alert %s, which the rule file does not have", rel, name)
			}
		}
	}
	listed := AlertsNamed(page(t, r, "docs/operations.md"))
	for name := range alerts {
		if !listed[name] {
			t.Errorf("docs/operations.md does not list the alert %s", name)
		}
	}
}

// The reliability page shows the committed soak summary (test/soak/results/summary.md) as
// `make soak` writes it there: everything after the summary's title, between the markers.
func TestSoakSummaryShown(t *testing.T) {
	summary, err := os.ReadFile(filepath.Join(root, "test", "soak", "results", "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "reliability.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- soak:begin (written by make soak) -->\n", "<!-- soak:end -->"
	_, want, _ := strings.Cut(string(summary), "\n\n")
	_, rest, ok := strings.Cut(string(page), begin)
	got, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("docs/reliability.md has no %q ... %q markers", strings.TrimSpace(begin), end)
	}
	if got != want {
		t.Errorf("docs/reliability.md's soak block differs from test/soak/results/summary.md (make soak writes both)")
	}
}
