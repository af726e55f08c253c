package main

import (
	"os"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/proxy"
)

// checkConfig is `pulsar-proxy check-config`: internal/checkconfig, with the parts that
// --connect exercises built by the proxy's own constructors.
func checkConfig(args []string) int {
	return checkconfig.Main(args, os.Environ(), os.Stdout, os.Stderr, connectParts)
}

// connectParts builds discovery, the live broker set and the broker CONNECT as the proxy
// does, without metrics and with logs off (check-config reports what they saw).
func connectParts(cfg *config.Config) (checkconfig.Parts, func(), error) {
	probe, err := proxy.NewProbe(cfg, version, zerolog.Nop())
	if err != nil {
		return checkconfig.Parts{}, nil, err
	}
	return checkconfig.Parts{Providers: probe.Providers, Brokers: probe.Brokers, Open: probe.Open}, func() {}, nil
}
