package brokers

import (
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/rs/zerolog"
)

// FuzzAllowTarget checks the target rule against any target and any pattern: an allowed
// target names the listed broker or a host that matches the pattern label by label (checked
// against a regexp, not the matcher under test), and is a clean host:port that parses back
// to itself. Seeds: testdata/fuzz/FuzzAllowTarget.
func FuzzAllowTarget(f *testing.F) {
	const listed = "b0.pulsar.svc"
	b0, err := ParseURL("pulsar://" + listed + ":6650")
	if err != nil {
		f.Fatal(err)
	}
	d := &listDiscovery{bs: []Broker{b0}}
	f.Fuzz(func(t *testing.T, target, pattern string) {
		set := NewSet(d, Options{AllowedHosts: []string{pattern}, Logger: zerolog.Nop()})
		b, err := set.Allow(target)
		if err != nil {
			return
		}
		if strings.ContainsAny(b.Host, "/@[]%") || strings.IndexFunc(b.Host, unicode.IsSpace) >= 0 || b.Host == "" {
			t.Fatalf("Allow(%q) with pattern %q gave host %q", target, pattern, b.Host)
		}
		if host, port, err := ParseTarget(b.Addr()); err != nil || host != b.Host || port != b.Port {
			t.Fatalf("Allow(%q) gave %q, which parses as %q %q %v", target, b.Addr(), host, port, err)
		}
		if b.Host == listed {
			return
		}
		if labels(b.Host) != labels(pattern) || !globMatch(pattern, b.Host) {
			t.Fatalf("Allow(%q) allowed host %q, which pattern %q does not match label by label", target, b.Host, pattern)
		}
	})
}

func labels(s string) int { return strings.Count(s, ".") + 1 }

// globMatch is the reference: the lower-cased pattern as an anchored regexp in which '*' is
// any run of characters other than '.' and '?' one such character.
func globMatch(pattern, host string) bool {
	var re strings.Builder
	re.WriteString("^")
	for _, r := range strings.ToLower(pattern) {
		switch r {
		case '*':
			re.WriteString(`[^.]*`)
		case '?':
			re.WriteString(`[^.]`)
		default:
			re.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(strings.ToLower(host))
}
