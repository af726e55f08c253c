package authz

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// TopicName is a topic name as the broker reads it: ParseTopic follows Apache Pulsar's
// org.apache.pulsar.common.naming.TopicName (Pulsar 4.0.8) step by step, so the tenant,
// namespace and topic a policy rule is matched against are the ones the broker acts on.
type TopicName struct {
	Domain    string // "persistent" or "non-persistent" (Pulsar matches it ignoring case)
	Tenant    string
	Namespace string
	Local     string // the local name, with any "-partition-N" suffix
	// Partition is the partition index when Local names a partition by Pulsar's rule
	// (TopicName.getPartitionIndex), else -1.
	Partition int
	// Base is the partitioned topic's local name: Local up to its last "-partition-" when
	// Partition >= 0 (it may then be empty, as Pulsar allows "-partition-0"), else Local.
	Base string
}

// String returns the complete name, domain://tenant/namespace/local (Pulsar's toString).
func (t TopicName) String() string {
	return t.Domain + "://" + t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// Errors of ParseTopic. Each refusal wraps one of them.
var (
	// errInvalidTopic: Pulsar's TopicName refuses the name too.
	errInvalidTopic = errors.New("not a valid Pulsar topic name")
	// errLegacyTopic: a valid legacy name (tenant/cluster/namespace/topic). It names a v1
	// namespace tenant/cluster/namespace that no tenant/namespace/topic rule can describe.
	errLegacyTopic = errors.New("legacy topic names (tenant/cluster/namespace/topic) are refused")
	// errTopicNotUTF8: the broker decodes invalid bytes to U+FFFD, so it would not read the
	// name the proxy reads.
	errTopicNotUTF8 = errors.New("topic name is not valid UTF-8")
)

// Pulsar's TopicDomain values.
const (
	DomainPersistent    = "persistent"
	DomainNonPersistent = "non-persistent"
)

const partitionSuffix = "-partition-"

// ParseTopic reads name as Pulsar's TopicName does and returns its parts, or an error for a
// name Pulsar refuses, a legacy four-part name (errLegacyTopic) and a name that is not
// valid UTF-8 (errTopicNotUTF8). Short names are expanded as the broker expands them: "t" and
// "/t/" are persistent://public/default/t, "a/b/c" is persistent://a/b/c.
func ParseTopic(name string) (TopicName, error) {
	if !utf8.ValidString(name) {
		return TopicName{}, fmt.Errorf("%q: %w", name, errTopicNotUTF8)
	}
	complete := name
	if !strings.Contains(name, "://") {
		// A short name: split on '/' dropping empty tokens (commons-lang StringUtils.split);
		// three tokens keep the name as it is, one token goes to public/default.
		switch tokens := splitNonEmpty(name, '/'); len(tokens) {
		case 3:
			complete = DomainPersistent + "://" + name
		case 1:
			complete = DomainPersistent + "://public/default/" + tokens[0]
		default:
			return TopicName{}, invalidTopic(name, "a short name is <tenant>/<namespace>/<topic> or <topic>")
		}
	}
	domainPart, rest, _ := strings.Cut(complete, "://")
	domain, ok := topicDomain(domainPart)
	if !ok {
		return TopicName{}, invalidTopic(name, "unknown domain")
	}
	// Guava Splitter.on("/").limit(4): the fourth part keeps any further '/'.
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 3 && len(parts) != 4 {
		return TopicName{}, invalidTopic(name, "not <tenant>/<namespace>/<topic>")
	}
	for _, p := range parts[:len(parts)-1] { // tenant, [cluster,] namespace
		if !isNamedEntity(p) {
			return TopicName{}, invalidTopic(name, "tenant, cluster and namespace are non-empty and only [-=:.a-zA-Z0-9_]")
		}
	}
	local := parts[len(parts)-1]
	if isJavaBlank(local) {
		return TopicName{}, invalidTopic(name, "blank local name")
	}
	if len(parts) == 4 {
		return TopicName{}, fmt.Errorf("%q: %w", name, errLegacyTopic)
	}
	// Pulsar takes the index from the complete name; a "-partition-" before the local name
	// would leave a '/' in what follows it, which is no number, so the local name decides.
	t := TopicName{Domain: domain, Tenant: parts[0], Namespace: parts[1], Local: local,
		Partition: partitionIndex(local), Base: local}
	if t.Partition >= 0 {
		t.Base = local[:strings.LastIndex(local, partitionSuffix)]
	}
	return t, nil
}

func invalidTopic(name, why string) error {
	return fmt.Errorf("%q: %w: %s", name, errInvalidTopic, why)
}

// splitNonEmpty splits s at sep and drops empty tokens, as StringUtils.split(s, sep).
func splitNonEmpty(s string, sep byte) []string {
	var out []string
	for _, tok := range strings.Split(s, string(sep)) {
		if tok != "" {
			out = append(out, tok)
		}
	}
	return out
}

// topicDomain is TopicDomain.getEnum: String.equalsIgnoreCase against each domain's value.
func topicDomain(s string) (string, bool) {
	for _, d := range []string{DomainPersistent, DomainNonPersistent} {
		if javaEqualsIgnoreCase(d, s) {
			return d, true
		}
	}
	return "", false
}

// javaEqualsIgnoreCase is Java's String.equalsIgnoreCase for an ASCII a: equal length in
// UTF-16 code units, and char by char equal, equal in upper case, or equal in the lower case
// of the upper case. So "PERSISTENT", and also "perſiſtent" (U+017F, whose upper case is
// 'S'), "persıstent" (U+0131) and "persİstent" (U+0130, lower case 'i') match "persistent".
func javaEqualsIgnoreCase(a, s string) bool {
	if utf8.RuneCountInString(s) != len(a) {
		return false
	}
	i := 0
	for _, c2 := range s {
		c1 := rune(a[i])
		i++
		if c2 > 0xFFFF { // two UTF-16 code units: the lengths differ
			return false
		}
		if c1 == c2 {
			continue
		}
		u1, u2 := unicode.ToUpper(c1), unicode.ToUpper(c2)
		if u1 == u2 || unicode.ToLower(u1) == unicode.ToLower(u2) {
			continue
		}
		return false
	}
	return true
}

// isNamedEntity is NamespaceName's check of a tenant, cluster or namespace: non-empty and
// matching NamedEntity's ^[-=:.\w]*$ (Java's \w is ASCII [a-zA-Z_0-9]).
func isNamedEntity(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '-', c == '=', c == ':', c == '.':
		default:
			return false
		}
	}
	return true
}

// isJavaBlank is commons-lang StringUtils.isBlank: empty, or every UTF-16 code unit is
// Character.isWhitespace.
func isJavaBlank(s string) bool {
	for _, r := range s {
		if !isJavaWhitespace(r) {
			return false
		}
	}
	return true
}

// isJavaWhitespace is Character.isWhitespace of a char: a Unicode space separator other than
// the no-break spaces U+00A0, U+2007 and U+202F, a line or paragraph separator, or one of
// \t \n \v \f \r and U+001C..U+001F.
func isJavaWhitespace(r rune) bool {
	switch {
	case r >= '\t' && r <= '\r', r >= 0x1C && r <= 0x1F:
		return true
	case r == 0xA0, r == 0x2007, r == 0x202F, r > 0xFFFF:
		return false
	}
	return unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp)
}

// partitionIndex is TopicName.getPartitionIndex: what follows the last "-partition-" read
// by Integer.parseInt, kept only when it is not negative and written exactly as
// String.valueOf writes it back (no sign, no leading zeros); -1 otherwise.
func partitionIndex(name string) int {
	i := strings.LastIndex(name, partitionSuffix)
	if i < 0 {
		return -1
	}
	idx := name[i+len(partitionSuffix):]
	// Integer.parseInt also takes a sign, but "+7" and "-0" are longer than what
	// String.valueOf makes of their value and "-7" is negative: all give -1.
	v, n := 0, 0
	for _, r := range idx {
		d := javaDigit(r)
		if d < 0 {
			return -1
		}
		if v = v*10 + d; v > 1<<31-1 { // Integer.parseInt overflows
			return -1
		}
		n++
	}
	if n == 0 || n != len(strconv.Itoa(v)) {
		return -1
	}
	return v
}

// javaDigit is Character.digit(char, 10): the value of a decimal digit (Unicode category Nd,
// any script: Integer.parseInt reads "٣" as 3), or -1. Supplementary characters are two
// chars to Java, neither of them a digit. Nd digits come in runs of ten from zero to nine.
func javaDigit(r rune) int {
	if r > 0xFFFF || !unicode.Is(unicode.Nd, r) {
		return -1
	}
	zero := r
	for unicode.Is(unicode.Nd, zero-1) {
		zero--
	}
	return int(r-zero) % 10
}
