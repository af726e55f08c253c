package main

import (
	"context"
	"os"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// checkConfig is `pulsar-proxy check-config`: internal/checkconfig, with the parts that
// --connect exercises built by the proxy's own constructors.
func checkConfig(args []string) int {
	return checkconfig.Main(args, os.Environ(), os.Stdout, os.Stderr, connectParts)
}

// connectParts builds discovery, the live broker set and the broker CONNECT as build does,
// without metrics and with logs off (check-config reports what they saw).
func connectParts(cfg *config.Config) (checkconfig.Parts, func(), error) {
	log := zerolog.Nop()
	providers, err := discoveryProviders(cfg.Discovery, cfg.Broker.TLS.BrokerTLSEnabled, log, lookup.NewMetrics(nil))
	if err != nil {
		return checkconfig.Parts{}, nil, err
	}
	connector, err := newConnector(cfg, log)
	if err != nil {
		return checkconfig.Parts{}, nil, err
	}
	open := func(ctx context.Context, addr string) (*upstream.Conn, error) {
		return connector.Open(ctx, addr, nil, nil, upstream.Client{})
	}
	parts := checkconfig.Parts{Providers: providers, Brokers: newBrokerSet(cfg.Broker, providers, log), Open: open}
	return parts, func() {}, nil
}
