package discovery

import (
	"context"
	"slices"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

func TestStaticWebURLs(t *testing.T) {
	s, err := NewStaticWeb([]string{"pulsar://b0:6650", "pulsar://[::1]:6650"}, []string{"HTTP://B0:8080/", "https://[::1]:8443"})
	if err != nil {
		t.Fatal(err)
	}
	var webs []string
	for _, b := range s.Brokers() {
		webs = append(webs, b.Web)
	}
	if !slices.Equal(webs, []string{"http://b0:8080", "https://[::1]:8443"}) {
		t.Errorf("web URLs %q", webs)
	}
	for _, bad := range [][]string{{"http://b0:8080"}, {"http://b0:8080", "pulsar://b1:8080"}, {"http://b0:8080", "http://b1:8080/admin"}} {
		if _, err := NewStaticWeb([]string{"pulsar://b0:6650", "pulsar://b1:6650"}, bad); err == nil {
			t.Errorf("web URLs %q accepted", bad)
		}
	}
}

func TestConsulWebPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  consul.AgentService
		tls  bool
		want string
	}{
		{"binary port, no web meta", consul.AgentService{Address: "10.0.0.1", Port: 6650}, false, ""},
		{"binary port, web_port meta", consul.AgentService{Address: "10.0.0.1", Port: 6650, Meta: map[string]string{"web_port": "8080"}}, false, "http://10.0.0.1:8080"},
		{"registered on the web port", consul.AgentService{Address: "b0.pulsar", Port: 8443, Meta: map[string]string{"pulsar_port": "6651"}}, true, "https://b0.pulsar:8443"},
		{"web_port wins", consul.AgentService{Address: "b0", Port: 8080, Meta: map[string]string{"pulsar_port": "6650", "web_port": "9090"}}, false, "http://b0:9090"},
	} {
		svc := tc.svc
		svc.ID = "b"
		b, err := consulBroker(&consul.ServiceEntry{Service: &svc}, tc.tls)
		if err != nil || b.Web != tc.want {
			t.Errorf("%s: web %q, err %v; want %q", tc.name, b.Web, err, tc.want)
		}
	}
	for _, bad := range []string{"x", "0", "70000"} {
		if _, err := consulBroker(&consul.ServiceEntry{Service: &consul.AgentService{ID: "b", Address: "b0", Port: 6650, Meta: map[string]string{"web_port": bad}}}, false); err == nil {
			t.Errorf("web_port %q accepted", bad)
		}
	}
}

func TestDNSWebPort(t *testing.T) {
	srv := startDNSServer(t)
	srv.set(1 /* A */, "b.example. 30 IN A 10.0.0.1")
	d, err := NewDNS(DNSConfig{Name: "b.example", Port: 6650, WebPort: 8443, WebTLS: true, Server: srv.addr, Interval: time.Hour}, zerolog.Nop(), NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := d.resolve(context.Background())
	if err != nil || len(bs) != 1 || bs[0].Web != "https://10.0.0.1:8443" {
		t.Fatalf("resolve: %+v %v", bs, err)
	}
}
