package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

var (
	metricInDocs   = regexp.MustCompile(`pulsar_proxy_[a-z0-9_]*`)
	metricInSource = regexp.MustCompile(`"(pulsar_proxy_[a-z0-9_]+)"`)
	// A configuration key as the pages write it: a top-level section of config.yaml, then
	// the path, optionally followed by a value (`session.passthrough: false`).
	configKey = regexp.MustCompile(`^((listen|discovery|broker|session|log|auth|authz|tls|proxyProtocol|admin)(\.[A-Za-z][A-Za-z0-9]*)+)(:.*|=.*)?$`)
	alertName = regexp.MustCompile(`^PulsarProxy[A-Za-z0-9]+$`)
)

// ProductMetrics are the metric names the product's Go source defines (string literals
// "pulsar_proxy_..." outside tests and outside the other modules).
func ProductMetrics(root string) (map[string]bool, error) {
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || isModule(p)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range metricInSource.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	return names, err
}

// isModule: dir holds a go.mod of its own (test/, bench/, tools/...), not the product's.
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// UnknownMetrics are the metric names of a page's text that the product does not define. A name ending
// in "_" (`pulsar_proxy_discovery_*`) stands for a family: some metric must start with it.
// Histogram series (_bucket, _sum, _count) are their histogram's.
func UnknownMetrics(src []byte, known map[string]bool) []string {
	var unknown []string
	for _, m := range metricInDocs.FindAllString(string(src), -1) {
		if !metricKnown(m, known) {
			unknown = append(unknown, m)
		}
	}
	return unknown
}

func metricKnown(m string, known map[string]bool) bool {
	if strings.HasSuffix(m, "_") {
		for k := range known {
			if strings.HasPrefix(k, m) {
				return true
			}
		}
		return false
	}
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(m, suffix); ok && known[base] {
			return true
		}
	}
	return false
}

// ConfigKeys are the key paths of config.example.yaml ("session.passthrough"), sections
// included ("broker.tls").
func ConfigKeys(example []byte) (map[string]bool, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(example, &root); err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
			n = n.Content[0]
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := prefix + n.Content[i].Value
			keys[key] = true
			walk(n.Content[i+1], key+".")
		}
	}
	walk(&root, "")
	return keys, nil
}

// UnknownConfigKeys are the code spans of p that name a configuration key config.example.yaml
// does not have.
func UnknownConfigKeys(p *Page, keys map[string]bool) []Span {
	var unknown []Span
	for _, c := range p.Code {
		m := configKey.FindStringSubmatch(strings.TrimSpace(c.Text))
		if m != nil && !keys[m[1]] {
			unknown = append(unknown, c)
		}
	}
	return unknown
}

// AlertNames are the alerts of a Prometheus rule file.
func AlertNames(rules []byte) (map[string]bool, error) {
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rules, &file); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names[r.Alert] = true
			}
		}
	}
	return names, nil
}

// AlertsNamed are the alert names p gives in code spans (`PulsarProxyDown`).
func AlertsNamed(p *Page) map[string]bool {
	named := map[string]bool{}
	for _, c := range p.Code {
		if alertName.MatchString(c.Text) {
			named[c.Text] = true
		}
	}
	return named
}
