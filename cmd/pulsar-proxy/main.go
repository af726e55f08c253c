// Command pulsar-proxy is a gateway in front of Apache Pulsar brokers. This package is the
// process's shell: flags, subcommands, the configuration, signals and exit codes; the proxy
// is built and run by internal/app/proxy.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/proxy"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

func main() {
	if code, ok := subcommand(os.Args[1:]); ok {
		os.Exit(code)
	}
	configPath := flag.String("config", "", "YAML configuration file (environment variables PULSAR_PROXY_* override it)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("pulsar-proxy", binaryVersion())
		return
	}
	cfg, err := config.Load(*configPath, os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulsar-proxy:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "pulsar-proxy:", err)
		os.Exit(1)
	}
}

// run builds the proxy and serves until SIGINT or SIGTERM, then lets it drain; it returns
// early when a part cannot start or a Pulsar listener fails.
func run(cfg *config.Config) error {
	hup := make(chan os.Signal, 1)
	p, err := proxy.Build(cfg, proxy.Options{Version: binaryVersion(), Reload: hup})
	if err != nil {
		return err
	}
	defer p.Close()
	if p.ReloadsOnSignal() {
		// Only then: without anything to reload, SIGHUP keeps its default and ends the process.
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return p.Run(ctx)
}
