// Command pulsar-proxy is a gateway in front of Apache Pulsar brokers. This package only wires
// the parts together; the behaviour lives in the packages.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// protocolVersion is the highest Pulsar protocol version the proxy speaks (v21: Pulsar 3.x/4.x).
const protocolVersion = 21

// maxPendingPerBrokerConn bounds the lookups in flight on one pooled broker connection; each
// client connection is bounded separately by session.maxPendingLookups.
const maxPendingPerBrokerConn = 10000

func main() {
	if code, ok := subcommand(os.Args[1:]); ok {
		os.Exit(code)
	}
	configPath := flag.String("config", "", "YAML configuration file (environment variables PULSAR_PROXY_* override it)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("pulsar-proxy", version)
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

// run builds the proxy, serves until SIGINT or SIGTERM, then drains it; it returns early
// when a part cannot start or a Pulsar listener fails.
func run(cfg *config.Config) error {
	log, summaryLevel, err := newLogger(cfg.Log)
	if err != nil {
		return err
	}
	p, err := build(cfg, log, summaryLevel)
	if err != nil {
		return err
	}
	defer p.pool.Close()
	if p.muxPool != nil {
		defer p.muxPool.Close()
	}
	lns, err := p.openListeners()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	background, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	p.startBackground(background)

	httpSrvs := p.serveHTTP(lns)
	if cfg.Listen.Pprof != "" {
		pprofSrv, err := servePprof(cfg.Listen.Pprof)
		if err != nil {
			return err
		}
		defer pprofSrv.Close()
	}
	serveErr := p.serve(lns)
	select {
	case <-ctx.Done():
		log.Info().Dur("drain_timeout", cfg.Session.DrainTimeout).Msg("stopping: draining sessions")
	case err := <-serveErr:
		p.listening.Store(false)
		return fmt.Errorf("pulsar listener: %w", err)
	}
	p.drain(httpSrvs...)
	log.Info().Msg("pulsar-proxy stopped")
	return nil
}

func newLogger(c config.Log) (zerolog.Logger, zerolog.Level, error) {
	level, err := zerolog.ParseLevel(c.Level)
	if err != nil {
		return zerolog.Logger{}, 0, fmt.Errorf("log.level: %w", err)
	}
	summary := zerolog.Disabled
	if c.SessionSummary != "off" {
		if summary, err = zerolog.ParseLevel(c.SessionSummary); err != nil {
			return zerolog.Logger{}, 0, fmt.Errorf("log.sessionSummary: %w", err)
		}
	}
	var out = zerolog.New(os.Stderr)
	if c.Format == "console" {
		out = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.RFC3339})
	}
	return out.Level(level).With().Timestamp().Logger(), summary, nil
}
