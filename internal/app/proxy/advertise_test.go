package proxy

import (
	"net/http/httptest"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/adminproxy"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

func TestAdvertiseNamesTheListenersAsTheClientReachedThem(t *testing.T) {
	p := &Proxy{cfg: &config.Config{}, addrs: Addrs{Pulsar: "0.0.0.0:6650", PulsarTLS: "[::]:6651", HTTP: "127.0.0.1:8080"}}
	for host, want := range map[string]adminproxy.Advertised{
		"gw.example:8080": {Pulsar: "pulsar://gw.example:6650", PulsarTLS: "pulsar+ssl://gw.example:6651", HTTP: "http://gw.example:8080"},
		"[::1]:8080":      {Pulsar: "pulsar://[::1]:6650", PulsarTLS: "pulsar+ssl://[::1]:6651", HTTP: "http://[::1]:8080"},
		"GW":              {Pulsar: "pulsar://GW:6650", PulsarTLS: "pulsar+ssl://GW:6651", HTTP: "http://GW:8080"},
		"evil/x@y:80":     {Pulsar: "pulsar://localhost:6650", PulsarTLS: "pulsar+ssl://localhost:6651", HTTP: "http://localhost:8080"},
	} {
		r := httptest.NewRequest("GET", "/lookup/v2/topic/persistent/a/b/c", nil)
		r.Host = host
		if got := p.advertise(r); got != want {
			t.Errorf("Host %q: %+v, want %+v", host, got, want)
		}
	}
	p.cfg.Listen.Advertised = config.Advertised{Pulsar: "pulsar://lb:16650"}
	r := httptest.NewRequest("GET", "/lookup/v2/topic/persistent/a/b/c", nil)
	r.Host = "gw:8080"
	if got := p.advertise(r); got.Pulsar != "pulsar://lb:16650" || got.HTTP != "http://gw:8080" || got.HTTPS != "" {
		t.Errorf("configured URL: %+v", got)
	}
}
