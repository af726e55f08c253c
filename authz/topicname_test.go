package authz

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"testing"
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
			if !errors.Is(err, ErrTopicNotUTF8) {
				t.Errorf("%q: %+v %v, want ErrTopicNotUTF8", in, got, err)
			}
		case !a.Valid:
			if !errors.Is(err, ErrInvalidTopic) {
				t.Errorf("%q: %+v %v, want ErrInvalidTopic (Pulsar: %s)", in, got, err, a.Error)
			}
		case a.Cluster != "":
			if !errors.Is(err, ErrLegacyTopic) {
				t.Errorf("%q: %+v %v, want ErrLegacyTopic (Pulsar: cluster %q)", in, got, err, a.Cluster)
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
