// Command pulsar-proxy is a gateway in front of Apache Pulsar brokers. This package is the
// process's shell: its arguments, environment, standard streams, signals and exit code; the
// command line is read by internal/app/cli, and the proxy built and run by
// internal/app/proxy.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/cli"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/proxy"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Options{
		Version: binaryVersion(), Environ: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Run: run,
	}))
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
