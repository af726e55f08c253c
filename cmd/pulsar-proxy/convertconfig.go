package main

import (
	"os"

	"github.com/pulsar-proxy/pulsar-proxy/internal/convert"
)

// convertConfig is `pulsar-proxy convert-config`: internal/convert.
func convertConfig(args []string) int {
	return convert.Main(args, os.Stdin, os.Stdout, os.Stderr)
}
