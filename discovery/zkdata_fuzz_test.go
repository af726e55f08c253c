package discovery

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// FuzzZKBroker: whatever a znode under /loadbalance/brokers holds (anyone with write access to
// ZooKeeper can put anything there), reading it does not panic, a broker it yields is one a
// configured URL could name (a checked host and port, the scheme the proxy dials), and the
// only web URL the live set makes of it is canonical, of the configured scheme, on an allowed
// web port and on the broker's own host (or, with a listener, the registration's default one).
func FuzzZKBroker(f *testing.F) {
	f.Add([]byte(registration("broker-0.pulsar", 6650, 8080)), false, "")
	f.Add([]byte(registration("10.0.0.7", 6650, 8080)), true, "internal")
	f.Add([]byte(`{"pulsarServiceUrl":"pulsar://u:p@evil:6650/x","webServiceUrl":"http://b:8080/admin"}`), false, "")
	f.Add([]byte(`{"advertisedListeners":{"x":{"brokerServiceUrl":"pulsar://[::1]:6650"}}}`), false, "x")
	f.Add([]byte(`{"pulsarServiceUrl":"pulsar://b:6650","webServiceUrl":"http://169.254.169.254:80"}`), false, "")
	f.Add([]byte(`{"pulsarServiceUrl":"pulsar://b:6650","webServiceUrl":"HTTP://B:8080/"}`), false, "")
	f.Fuzz(func(t *testing.T, data []byte, tls bool, listener string) {
		b, err := parseZKBroker(data, zkBrokerChoice{TLS: tls, Listener: listener})
		if err != nil {
			return
		}
		again, err := brokers.ParseURL(b.URL)
		if err != nil || again.Addr() != b.Addr() || b.TLS != tls {
			t.Fatalf("accepted %+v from %q: %v", b, data, err)
		}
		set := brokers.NewSet(&Static{list: []brokers.Broker{b}}, brokers.Options{AllowedWebPorts: []string{"8080", "8443"}, WebTLS: tls, Logger: zerolog.Nop()})
		for _, web := range set.WebURLs() {
			wtls, host, port, err := brokerhost.ParseWebURL(web)
			switch {
			case err != nil || brokers.WebURL(wtls, host, port) != web:
				t.Fatalf("web URL %q from %q is not canonical: %v", web, data, err)
			case wtls != tls || port != "8080" && port != "8443":
				t.Fatalf("web URL %q from %q: scheme or port not allowed", web, data)
			case host != b.Host && (listener == "" || host != b.WebHost):
				t.Fatalf("web URL %q from %q is not on the broker's host %q", web, data, b.Host)
			}
		}
	})
}
