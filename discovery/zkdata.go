package discovery

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// zkBrokersPath is where every Pulsar broker registers itself, one ephemeral znode per broker
// named by its broker id (host:webport), both with the modular load manager (LocalBrokerData)
// and the extensible one (BrokerLookupData). Both carry the URL fields below.
const zkBrokersPath = "/loadbalance/brokers"

// zkBrokerData is the part of a broker's registration the proxy reads.
type zkBrokerData struct {
	PulsarServiceURL    string `json:"pulsarServiceUrl"`
	PulsarServiceURLTLS string `json:"pulsarServiceUrlTls"`
	WebServiceURL       string `json:"webServiceUrl"`
	WebServiceURLTLS    string `json:"webServiceUrlTls"`
	// AdvertisedListeners maps a listener name (advertisedListeners=internal:pulsar://...)
	// to that listener's URLs.
	AdvertisedListeners map[string]struct {
		BrokerServiceURL    string `json:"brokerServiceUrl"`
		BrokerServiceURLTLS string `json:"brokerServiceUrlTls"`
	} `json:"advertisedListeners"`
}

// zkBrokerChoice says which of a registration's URLs the proxy uses.
type zkBrokerChoice struct {
	TLS      bool   // the TLS binary and web URLs (broker.tls.enabled)
	Listener string // an advertised listener's binary URL instead of the default one
}

// parseZKBroker turns a broker's registration into a brokers.Broker. A registration without the
// binary URL the proxy needs is an error (the broker is skipped). The web URL is passed on as
// written: whoever can write the registration chooses it, so brokers.Set checks it (syntax,
// scheme, host, port) as it checks the other sources'; one that fails leaves the broker serving
// topics without the admin API, and the set warns once.
func parseZKBroker(data []byte, c zkBrokerChoice) (brokers.Broker, error) {
	var d zkBrokerData
	if err := json.Unmarshal(data, &d); err != nil {
		return brokers.Broker{}, fmt.Errorf("not a broker registration: %v", err)
	}
	raw, what := d.PulsarServiceURL, "pulsarServiceUrl"
	if c.TLS {
		raw, what = d.PulsarServiceURLTLS, "pulsarServiceUrlTls"
	}
	if c.Listener != "" {
		l, ok := d.AdvertisedListeners[c.Listener]
		if !ok {
			return brokers.Broker{}, fmt.Errorf("no advertised listener %q", c.Listener)
		}
		raw, what = l.BrokerServiceURL, "listener "+c.Listener+" brokerServiceUrl"
		if c.TLS {
			raw, what = l.BrokerServiceURLTLS, "listener "+c.Listener+" brokerServiceUrlTls"
		}
	}
	if raw == "" {
		return brokers.Broker{}, fmt.Errorf("no %s (is the broker's %s port enabled?)", what, map[bool]string{true: "TLS", false: "plaintext"}[c.TLS])
	}
	b, err := brokers.ParseURL(strings.TrimSuffix(raw, "/"))
	if err != nil {
		return brokers.Broker{}, err
	}
	if b.TLS != c.TLS {
		return brokers.Broker{}, fmt.Errorf("%s %q: wrong scheme", what, raw)
	}
	b.Web = d.WebServiceURL
	if c.TLS {
		b.Web = d.WebServiceURLTLS
	}
	if c.Listener != "" {
		b.WebHost = d.defaultHost(c.TLS)
	}
	return b, nil
}

// defaultHost is the host of the registration's own pulsarServiceUrl (pulsarServiceUrlTls),
// which a broker usually derives from the same address as its webServiceUrl; "" if none.
func (d zkBrokerData) defaultHost(tls bool) string {
	raw := d.PulsarServiceURL
	if tls {
		raw = d.PulsarServiceURLTLS
	}
	_, host, _, err := brokerhost.ParseURL(raw)
	if err != nil {
		return ""
	}
	return host
}
