package proxy

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/discovery"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Probe is how the proxy finds its brokers and opens its own connection to one, made by the
// constructors Build uses, for check-config --connect: the discovery providers, the live
// broker set over them (with the broker.* target rule), and the broker CONNECT of the proxy's
// own connections (broker TLS and client certificate, the proxy's credentials and own
// principal). It keeps no metrics; nothing runs until a provider's Run.
type Probe struct {
	Providers []discovery.Provider
	Brokers   *brokers.Set
	connector *upstream.Connector
}

// NewProbe builds the Probe of cfg; version is the proxy's, as in Options.
func NewProbe(cfg *config.Config, version string, log zerolog.Logger) (*Probe, error) {
	providers, err := discoveryProviders(cfg.Discovery, cfg.Broker.TLS.Enabled, log, discovery.NewMetrics(nil))
	if err != nil {
		return nil, err
	}
	connector, err := newConnector(cfg, version, log)
	if err != nil {
		return nil, err
	}
	return &Probe{Providers: providers, Brokers: newLiveSet(cfg.Broker, cfg.SNI.ServiceNames, providers, log), connector: connector}, nil
}

// Open dials the broker at addr and completes the proxy's CONNECT with it, as the proxy's
// own lookup connections do (no PROXY header, no client behind it).
func (p *Probe) Open(ctx context.Context, addr string) (*upstream.Conn, error) {
	return p.connector.Open(ctx, addr, nil, nil, upstream.Client{})
}
