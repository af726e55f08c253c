package authz

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// pulsarAnswer is an entry of testdata/topicnames.json: Pulsar 4.0.8's TopicName reading of an
// input (test/rig/topicname_test.go checks them against Pulsar's jar).
type pulsarAnswer struct {
	Input       *string `json:"input"`
	InputBase64 string  `json:"inputBase64"`
	Valid       bool    `json:"valid"`
	Error       string  `json:"error"`
	Domain      string  `json:"domain"`
	Tenant      string  `json:"tenant"`
	Cluster     string  `json:"cluster"`
	Namespace   string  `json:"namespace"`
	Local       string  `json:"local"`
	Partition   *int    `json:"partitionIndex"`
	Partitioned string  `json:"partitionedTopicName"`
	Complete    string  `json:"completeName"`
}

func loadPulsarAnswers(t testing.TB) []pulsarAnswer {
	b, err := os.ReadFile("testdata/topicnames.json")
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Names []pulsarAnswer `json:"names"`
	}
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	return table.Names
}

func (a pulsarAnswer) input(t testing.TB) string {
	if a.Input != nil {
		return *a.Input
	}
	b, err := base64.StdEncoding.DecodeString(a.InputBase64)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParseTopicMatchesPulsar: ParseTopic reads every name of the table as Pulsar does, and
// refuses what Pulsar refuses, the valid legacy names, and the bytes that are not UTF-8.
func TestParseTopicMatchesPulsar(t *testing.T) {
	answers := loadPulsarAnswers(t)
	if len(answers) < 100 {
		t.Fatalf("only %d names in the table", len(answers))
	}
	for _, a := range answers {
		in := a.input(t)
		got, err := ParseTopic(in)
		switch {
		case !utf8.ValidString(in):
			if !errors.Is(err, errTopicNotUTF8) {
				t.Errorf("%q: %+v %v, want errTopicNotUTF8", in, got, err)
			}
		case !a.Valid:
			if !errors.Is(err, errInvalidTopic) {
				t.Errorf("%q: %+v %v, want errInvalidTopic (Pulsar: %s)", in, got, err, a.Error)
			}
		case a.Cluster != "":
			if !errors.Is(err, errLegacyTopic) {
				t.Errorf("%q: %+v %v, want errLegacyTopic (Pulsar: cluster %q)", in, got, err, a.Cluster)
			}
		case err != nil:
			t.Errorf("%q: %v, Pulsar reads %s", in, err, a.Complete)
		default:
			want := TopicName{Domain: a.Domain, Tenant: a.Tenant, Namespace: a.Namespace, Local: a.Local, Partition: *a.Partition}
			partitioned := got.Domain + "://" + got.Tenant + "/" + got.Namespace + "/" + got.Base
			got.Base = ""
			if got != want || got.String() != a.Complete || partitioned != a.Partitioned {
				t.Errorf("%q:\n got  %+v %s, partitioned %s\n want %+v %s, partitioned %s", in, got, got.String(), partitioned, want, a.Complete, a.Partitioned)
			}
		}
	}
}

// TestParseTopicKeepsNormalNames: the names clients use read as before.
func TestParseTopicKeepsNormalNames(t *testing.T) {
	for _, c := range []struct {
		in   string
		want TopicName
	}{
		{"t", TopicName{"persistent", "public", "default", "t", -1, "t"}},
		{"t/ns/x", TopicName{"persistent", "t", "ns", "x", -1, "x"}},
		{"persistent://t/ns/x", TopicName{"persistent", "t", "ns", "x", -1, "x"}},
		{"non-persistent://t/ns/x", TopicName{"non-persistent", "t", "ns", "x", -1, "x"}},
		{"x-partition-3", TopicName{"persistent", "public", "default", "x-partition-3", 3, "x"}},
		{"persistent://t/ns/x-partition-10", TopicName{"persistent", "t", "ns", "x-partition-10", 10, "x"}},
	} {
		if got, err := ParseTopic(c.in); err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
}

// TestPolicyAllowedReadsNamesAsPulsar: the names the old normalisation let through to another
// namespace or topic than the broker reads.
func TestPolicyAllowedReadsNamesAsPulsar(t *testing.T) {
	p, err := ParsePolicy([]byte(`
rules:
  - roles: [alice]
    resources: ["acme/ns/orders", "public/default/t"]
    actions: [produce]
  - roles: [bob]
    resources: ["persistent://acme/ns/*"]
    actions: [produce]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role, topic string
		want        bool
	}{
		{"alice", "acme/ns/orders", true},
		{"alice", "persistent://acme/ns/orders-partition-7", true},
		{"alice", "persistent://acme/ns/orders-partition-\u0663", true}, // Integer.parseInt reads Arabic-Indic 3
		{"alice", "PERSISTENT://acme/ns/orders", true},                  // getEnum ignores case
		{"alice", "/t/", true},                                          // public/default/t for Pulsar
		// A legacy name is the v1 namespace acme/ANYCLUSTER/ns at the broker.
		{"alice", "persistent://acme/ANYCLUSTER/ns/orders", false},
		{"alice", "persistent://acme/ns/x/orders", false},
		// Not partitions of orders for Pulsar: distinct topics.
		{"alice", "acme/ns/orders-partition-", false},
		{"alice", "acme/ns/orders-partition-007", false},
		{"alice", "acme/ns/orders-partition-+7", false},
		{"alice", "acme/ns/orders-partition--1", false},
		{"alice", "acme/ns/orders-partition-2147483648", false},
		// Names Pulsar refuses, and bytes it would read differently.
		{"alice", "acme//ns/orders", false},
		{"alice", "persistent://acme//ns/orders", false},
		{"alice", "acme/ns/orders\xff", false},
		{"bob", "persistent://acme/ns/a", true},
		{"bob", "non-persistent://acme/ns/a", false},
		{"bob", "persistent://acme/ns/ ", false}, // blank local name
		{"bob", "persistent://acme/ns/a/b", false},
	} {
		if got := p.Allowed(c.role, ActionProduce, c.topic); got != c.want {
			t.Errorf("%s produce %q = %v, want %v", c.role, c.topic, got, c.want)
		}
	}
}

func TestParsePolicyRefusesEmptySegments(t *testing.T) {
	for _, res := range []string{"t//x", "/n/x", "t/n/", "persistent://t//x"} {
		if _, err := ParsePolicy([]byte(`rules: [{roles: [a], resources: ["` + res + `"], actions: [lookup]}]`)); err == nil {
			t.Errorf("resource %q accepted", res)
		}
	}
}

// FuzzParseTopic checks, for any input, that ParseTopic agrees with refTopicName (Pulsar's
// steps written out literally below) and that what it accepts cannot name two namespaces.
func FuzzParseTopic(f *testing.F) {
	for _, a := range loadPulsarAnswers(f) {
		f.Add(a.input(f))
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseTopic(in)
		ref, refErr := refTopicName(in)
		switch {
		case !utf8.ValidString(in):
			if !errors.Is(err, errTopicNotUTF8) {
				t.Fatalf("%q: %+v %v, want errTopicNotUTF8", in, got, err)
			}
			return
		case refErr != nil:
			if !errors.Is(err, errInvalidTopic) {
				t.Fatalf("%q: %+v %v; Pulsar's steps refuse it: %v", in, got, err, refErr)
			}
			return
		case ref.cluster != nil:
			if !errors.Is(err, errLegacyTopic) {
				t.Fatalf("%q: %+v %v; Pulsar's steps read the legacy name %s", in, got, err, ref.complete)
			}
			return
		case err != nil:
			t.Fatalf("%q: %v; Pulsar's steps read %s", in, err, ref.complete)
		}
		if got.Domain != ref.domain || got.Tenant != ref.tenant || got.Namespace != ref.namespace ||
			got.Local != ref.local || got.Partition != ref.partition || got.String() != ref.complete ||
			got.Domain+"://"+got.Tenant+"/"+got.Namespace+"/"+got.Base != ref.partitioned {
			t.Fatalf("%q: %+v; Pulsar's steps give %+v", in, got, ref)
		}
		// Tenant and namespace are one segment each, of the characters NamedEntity allows.
		for _, seg := range []string{got.Tenant, got.Namespace} {
			if seg == "" || strings.ContainsAny(seg, "/ ") || !namedEntity.MatchString(seg) {
				t.Fatalf("%q: segment %q", in, seg)
			}
		}
		if got.Local == "" || strings.Contains(got.Local, "/") || isJavaBlank(got.Local) {
			t.Fatalf("%q: local name %q", in, got.Local)
		}
		if got.Domain != DomainPersistent && got.Domain != DomainNonPersistent {
			t.Fatalf("%q: domain %q", in, got.Domain)
		}
		// The complete name reads back the same, and so does its short form.
		if again, err := ParseTopic(got.String()); err != nil || again != got {
			t.Fatalf("%q: %s reads as %+v %v, not %+v", in, got, again, err, got)
		}
		if got.Domain == DomainPersistent {
			short := got.Tenant + "/" + got.Namespace + "/" + got.Local
			if again, err := ParseTopic(short); err != nil || again != got {
				t.Fatalf("%q: %s reads as %+v %v, not %+v", in, short, again, err, got)
			}
		}
		// A partition is its partitioned topic's name plus -partition-N, and that base is
		// read the same way again (not as a partition of something else when it does not
		// itself end with a partition number).
		if got.Partition < 0 {
			if got.Base != got.Local {
				t.Fatalf("%q: base %q of a non-partition", in, got.Base)
			}
			return
		}
		suffix, ok := strings.CutPrefix(got.Local, got.Base+partitionSuffix)
		if !ok || strings.Contains(suffix, partitionSuffix) {
			t.Fatalf("%q: local %q, base %q", in, got.Local, got.Base)
		}
		canonical := got.Domain + "://" + got.Tenant + "/" + got.Namespace + "/" + got.Base + partitionSuffix + strconv.Itoa(got.Partition)
		if again, err := ParseTopic(canonical); err != nil || again.Partition != got.Partition || again.Base != got.Base {
			t.Fatalf("%q: %s reads as %+v %v", in, canonical, again, err)
		}
	})
}

var namedEntity = regexp.MustCompile(`^[-=:.\w]*$`) // NamedEntity.NAMED_ENTITY_PATTERN

// refTopic is what refTopicName reads: TopicName's fields.
type refTopic struct {
	domain, tenant, namespace, local string
	cluster                          *string
	partition                        int
	partitioned, complete            string
}

// refTopicName is TopicName's constructor (Pulsar 4.0.8) written out step by step on Java's
// UTF-16 view of the name, with each library call it makes spelled out. It shares only the
// char predicates (javaDigit, isJavaWhitespace) with the code under test; test/rig compares
// those with Java's for every char.
func refTopicName(name string) (refTopic, error) {
	var r refTopic
	complete := name
	if !strings.Contains(complete, "://") {
		parts := refStringUtilsSplit(complete, '/')
		if len(parts) == 3 {
			complete = "persistent" + "://" + complete
		} else if len(parts) == 1 {
			complete = "persistent" + "://" + "public" + "/" + "default" + "/" + parts[0]
		} else {
			return r, errors.New("Invalid short topic name")
		}
	}
	parts := refGuavaSplit(complete, "://", 2)
	domain, err := refTopicDomainGetEnum(parts[0])
	if err != nil {
		return r, err
	}
	r.domain = domain
	rest := parts[1]
	parts = refGuavaSplit(rest, "/", 4)
	if len(parts) == 3 {
		r.tenant, r.namespace, r.local = parts[0], parts[1], parts[2]
		r.partition = refGetPartitionIndex(complete)
		if err := refValidateNamespaceName(r.tenant, r.namespace); err != nil {
			return r, err
		}
	} else if len(parts) == 4 {
		r.tenant, r.cluster, r.namespace, r.local = parts[0], &parts[1], parts[2], parts[3]
		r.partition = refGetPartitionIndex(complete)
		if err := refValidateNamespaceName(r.tenant, *r.cluster, r.namespace); err != nil {
			return r, err
		}
	} else {
		return r, errors.New("Invalid topic name")
	}
	if refStringUtilsIsBlank(r.local) {
		return r, errors.New("Topic local name must not be blank")
	}
	if r.cluster == nil {
		r.complete = r.domain + "://" + r.tenant + "/" + r.namespace + "/" + r.local
	} else {
		r.complete = r.domain + "://" + r.tenant + "/" + *r.cluster + "/" + r.namespace + "/" + r.local
	}
	r.partitioned = r.complete
	if r.partition != -1 {
		r.partitioned = r.complete[:strings.LastIndex(r.complete, "-partition-")]
	}
	return r, nil
}

// refStringUtilsSplit is commons-lang StringUtils.split(str, separatorChar): the tokens
// between separators, empty ones dropped.
func refStringUtilsSplit(s string, sep rune) []string {
	var list []string
	start, match := 0, false
	for i, c := range s {
		if c == sep {
			if match {
				list = append(list, s[start:i])
				match = false
			}
			start = i + utf8.RuneLen(c)
			continue
		}
		match = true
	}
	if match {
		list = append(list, s[start:])
	}
	return list
}

// refGuavaSplit is Splitter.on(sep).limit(limit).splitToList(s): empty pieces kept, the last
// piece holding the rest once limit-1 separators were cut.
func refGuavaSplit(s, sep string, limit int) []string {
	var out []string
	for len(out) < limit-1 {
		i := strings.Index(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[:i])
		s = s[i+len(sep):]
	}
	return append(out, s)
}

// refTopicDomainGetEnum: the first domain whose value equalsIgnoreCase s, compared on UTF-16
// code units as String.regionMatches(true, ...) does.
func refTopicDomainGetEnum(s string) (string, error) {
	other := utf16.Encode([]rune(s))
	for _, value := range []string{"persistent", "non-persistent"} {
		this := utf16.Encode([]rune(value))
		if len(this) != len(other) {
			continue
		}
		equal := true
		for i := range this {
			c1, c2 := rune(this[i]), rune(other[i])
			if c1 == c2 {
				continue
			}
			if utf16.IsSurrogate(c2) { // Character.toUpperCase of a lone surrogate is itself
				equal = false
				break
			}
			u1, u2 := unicode.ToUpper(c1), unicode.ToUpper(c2)
			if u1 == u2 {
				continue
			}
			if unicode.ToLower(u1) == unicode.ToLower(u2) {
				continue
			}
			equal = false
			break
		}
		if equal {
			return value, nil
		}
	}
	return "", errors.New("Invalid topic domain")
}

// refGetPartitionIndex is TopicName.getPartitionIndex with Integer.parseInt spelled out.
func refGetPartitionIndex(topic string) int {
	partitionIndex := -1
	if strings.Contains(topic, "-partition-") {
		idx := topic[strings.LastIndex(topic, "-partition-")+len("-partition-"):] // substringAfterLast
		n, err := refIntegerParseInt(idx)
		if err == nil {
			partitionIndex = n
			if partitionIndex < 0 {
				partitionIndex = -1
			} else if len(utf16.Encode([]rune(idx))) != len(strconv.Itoa(partitionIndex)) {
				partitionIndex = -1
			}
		}
	}
	return partitionIndex
}

// refIntegerParseInt is Integer.parseInt(s, 10) on UTF-16 code units.
func refIntegerParseInt(s string) (int, error) {
	chars := utf16.Encode([]rune(s))
	if len(chars) == 0 {
		return 0, errors.New("NumberFormatException")
	}
	negative, i := false, 0
	limit := -(1<<31 - 1)
	if first := rune(chars[0]); first < '0' {
		if first == '-' {
			negative, limit = true, -(1 << 31)
		} else if first != '+' {
			return 0, errors.New("NumberFormatException")
		}
		if len(chars) == 1 {
			return 0, errors.New("NumberFormatException")
		}
		i++
	}
	multmin := limit / 10
	result := 0
	for ; i < len(chars); i++ {
		digit := -1
		if c := rune(chars[i]); !utf16.IsSurrogate(c) {
			digit = javaDigit(c)
		}
		if digit < 0 || result < multmin {
			return 0, errors.New("NumberFormatException")
		}
		result *= 10
		if result < limit+digit {
			return 0, errors.New("NumberFormatException")
		}
		result -= digit
	}
	if negative {
		return result, nil
	}
	return -result, nil
}

// refValidateNamespaceName is NamespaceName.validateNamespaceName: each part non-empty and
// NamedEntity.checkName. (NamespaceName.get then splits tenant/namespace again on '/', which
// gives back the same parts since they have passed the pattern.)
func refValidateNamespaceName(parts ...string) error {
	for _, p := range parts {
		if p == "" {
			return errors.New("Invalid namespace format")
		}
	}
	for _, p := range parts {
		if !namedEntity.MatchString(p) {
			return errors.New("Invalid named entity")
		}
	}
	return nil
}

// refStringUtilsIsBlank: every UTF-16 code unit is Character.isWhitespace (true when empty).
func refStringUtilsIsBlank(s string) bool {
	for _, c := range utf16.Encode([]rune(s)) {
		if utf16.IsSurrogate(rune(c)) || !isJavaWhitespace(rune(c)) {
			return false
		}
	}
	return true
}
