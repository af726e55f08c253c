package zkaddr

import (
	"fmt"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"zk:127.0.0.1:2181":           "[127.0.0.1:2181] ",
		"zk1:2181,zk2:2182/pulsar":    "[zk1:2181 zk2:2182] /pulsar",
		"zk:zk1,zk2/a/b":              "[zk1:2181 zk2:2181] /a/b",
		"zk:[::1]:2181,[::1]":         "[[::1]:2181 [::1]:2181] ",
		"zookeeper-0.zookeeper:2181/": "[zookeeper-0.zookeeper:2181] /",
	} {
		a, err := Parse(in)
		if got := fmt.Sprint(a.Servers) + " " + a.Chroot; err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"etcd:http://e:2379", "zk:", "zk:a:1,,b:2", "zk:a:1/x/", "zk:a:1/x//y", "zk:a:1/../x"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}
