package main

import (
	"os"

	"github.com/pulsar-proxy/pulsar-proxy/internal/checkconfig"
)

// checkConfig is `pulsar-proxy check-config`: internal/checkconfig.
func checkConfig(args []string) int {
	return checkconfig.Main(args, os.Environ(), os.Stdout, os.Stderr, version)
}
