package lookup

import (
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/lookup/brokerhost"
)

// FuzzZKBroker: whatever a znode under /loadbalance/brokers holds (anyone with write access to
// ZooKeeper can put anything there), reading it does not panic, and a broker it yields is one a
// configured URL could name: a checked host and port, the scheme the proxy dials, and a
// canonical web URL or none.
func FuzzZKBroker(f *testing.F) {
	f.Add([]byte(registration("broker-0.pulsar", 6650, 8080)), false, "")
	f.Add([]byte(registration("10.0.0.7", 6650, 8080)), true, "internal")
	f.Add([]byte(`{"pulsarServiceUrl":"pulsar://u:p@evil:6650/x","webServiceUrl":"http://b:8080/admin"}`), false, "")
	f.Add([]byte(`{"advertisedListeners":{"x":{"brokerServiceUrl":"pulsar://[::1]:6650"}}}`), false, "x")
	f.Fuzz(func(t *testing.T, data []byte, tls bool, listener string) {
		b, err := parseZKBroker(data, zkBrokerChoice{TLS: tls, Listener: listener})
		if err != nil {
			return
		}
		again, err := parseBrokerURL(b.URL)
		if err != nil || again.Addr() != b.Addr() || b.TLS != tls {
			t.Fatalf("accepted %+v from %q: %v", b, data, err)
		}
		if b.Web != "" {
			if _, _, _, err := brokerhost.ParseWebURL(b.Web); err != nil {
				t.Fatalf("web URL %q: %v", b.Web, err)
			}
		}
	})
}
