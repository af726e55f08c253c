package main

import (
	"os"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/convert"
)

// subcommand runs `pulsar-proxy check-config …` (internal/app/checkconfig) or `pulsar-proxy
// convert-config …` (internal/app/convert) when args (the command line after the program
// name) start with one, and returns its exit code; ok is false for the proxy itself (flags
// only).
func subcommand(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "check-config":
		return checkconfig.Main(args[1:], os.Environ(), os.Stdout, os.Stderr, binaryVersion()), true
	case "convert-config":
		return convert.Main(args[1:], os.Stdin, os.Stdout, os.Stderr), true
	}
	return 0, false
}
