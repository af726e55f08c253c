package rig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These tests need no running rig.

func TestParseTopic(t *testing.T) {
	for _, tc := range []struct{ in, full, ns, path string }{
		{"persistent://public/default/a", "persistent://public/default/a", "public/default", "persistent/public/default/a"},
		{"non-persistent://t/n/b", "non-persistent://t/n/b", "t/n", "non-persistent/t/n/b"},
		{"t/n/c", "persistent://t/n/c", "t/n", "persistent/t/n/c"},
		{"d", "persistent://public/default/d", "public/default", "persistent/public/default/d"},
		{"persistent://t/n/with space", "persistent://t/n/with space", "t/n", "persistent/t/n/with%20space"},
	} {
		tn, err := ParseTopic(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if tn.String() != tc.full || tn.NamespaceName() != tc.ns || tn.path() != tc.path {
			t.Errorf("%q: got %s %s %s", tc.in, tn, tn.NamespaceName(), tn.path())
		}
	}
	if got := must(ParseTopic("persistent://t/n/x")).Partition(3).String(); got != "persistent://t/n/x-partition-3" {
		t.Errorf("partition name %s", got)
	}
	for _, bad := range []string{"a/b", "http://t/n/x", "persistent://t//x", ""} {
		if _, err := ParseTopic(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestUniqueName(t *testing.T) {
	a, b := UniqueName("x y/z"), UniqueName("x y/z")
	if a == b || !strings.HasPrefix(a, "x-y-z-") {
		t.Errorf("UniqueName: %q %q", a, b)
	}
	topic := UniqueTopic(t, "p")
	if !strings.HasPrefix(topic, "persistent://public/default/p-") {
		t.Errorf("UniqueTopic: %q", topic)
	}
}

func TestLoadState(t *testing.T) {
	f := filepath.Join(t.TempDir(), "rig.env")
	state := `RIG_DIR=/tmp/r
CLUSTER=standalone
BROKER1_URL=pulsar://127.0.0.1:16650
BROKER1_HTTP=http://127.0.0.1:18080
BROKER1_ID=127.0.0.1:18080
BROKER1_PID=10
BROKER2_URL=pulsar://127.0.0.1:16651
BROKER2_HTTP=http://127.0.0.1:18081
BROKER2_ID=127.0.0.1:18081
BROKER2_PID=
CONSUL_HTTP=http://127.0.0.1:18500
CONSUL_ADDR=127.0.0.1:18500
`
	if err := os.WriteFile(f, []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := load(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.Owned() || r.Cluster != "standalone" || r.BrokerURL(2) != "pulsar://127.0.0.1:16651" || r.BrokerID(1) != "127.0.0.1:18080" || r.ConsulAddr != "127.0.0.1:18500" {
		t.Errorf("loaded %+v", r)
	}
	if b, ok := r.BrokerByURL("http://127.0.0.1:18081/"); !ok || b.N != 2 {
		t.Errorf("BrokerByURL: %+v %v", b, ok)
	}
	if r.adminBroker().N != 1 {
		t.Errorf("admin broker %d, want 1", r.adminBroker().N)
	}
	r.state["BROKER1_PID"] = ""
	r.state["BROKER2_PID"] = "11"
	if r.adminBroker().N != 2 {
		t.Errorf("with broker 1 stopped, admin broker %d, want 2", r.adminBroker().N)
	}
	if err := os.WriteFile(f, []byte("CLUSTER=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := load(f); err == nil {
		t.Error("incomplete state file: no error")
	}
}

// A one-broker rig without Consul (RIG_BROKERS=1, RIG_CONSUL=0) loads with broker 1 alone;
// without CONSUL=0 an empty Consul address is still an incomplete state file.
func TestLoadStateOfOneBrokerCluster(t *testing.T) {
	f := filepath.Join(t.TempDir(), "rig.env")
	state := `RIG_DIR=/tmp/b
CLUSTER=cluster-b
BROKERS=1
CONSUL=0
BROKER1_URL=pulsar://b:26650
BROKER1_HTTP=http://b:28080
BROKER1_ID=b:28080
BROKER2_URL=pulsar://127.0.0.1:16651
BROKER2_HTTP=http://127.0.0.1:18081
BROKER2_ID=127.0.0.1:18081
CONSUL_HTTP=
`
	if err := os.WriteFile(f, []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := load(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Brokers) != 1 || r.Cluster != "cluster-b" || r.BrokerURL(1) != "pulsar://b:26650" || r.ConsulHTTP != "" {
		t.Errorf("loaded %+v", r)
	}
	if err := os.WriteFile(f, []byte(strings.Replace(state, "CONSUL=0\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := load(f); err == nil {
		t.Error("no Consul address and no CONSUL=0: no error")
	}
}

func TestScriptsDir(t *testing.T) {
	dir, err := ScriptsDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rig.sh", "fetch-pulsar.sh", "build-consul.sh", "versions.env", "log4j2.xml", "pom.xml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	v, err := Versions()
	if err != nil || v["PULSAR_VERSION"] == "" || v["CONSUL_VERSION"] == "" {
		t.Errorf("versions %v %v", v, err)
	}
}
