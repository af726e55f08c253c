//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// The WebSocket benchmark (-websocket, `make bench-websocket`): WebSocket producers through
// pulsar-proxy's WebSocket API and through the broker's own WebSocket service (the Java
// implementation, webSocketServiceEnabled=true), side by side on broker 1 of one rig, rounds
// interleaved. Each run: Sessions producer sessions on topics of their own, each keeping
// Window messages in flight, for MeasureSec after WarmupSec; throughput from the acks, CPU
// from /proc of the proxy and of the broker (whose process also runs its WebSocket service).
// Results: bench/results/websocket.{json,md}.

type wsConfig struct {
	Sizes                 []int
	Sessions, Window      int
	WarmupSec, MeasureSec float64
	Rounds                int
	Note                  string
}

var (
	wsFullConfig  = wsConfig{Sizes: []int{1 << 10, 16 << 10}, Sessions: 4, Window: 500, WarmupSec: 5, MeasureSec: 30, Rounds: 3}
	wsQuickConfig = wsConfig{Sizes: []int{1 << 10, 16 << 10}, Sessions: 4, Window: 500, WarmupSec: 3, MeasureSec: 10, Rounds: 1}
)

const (
	wsPathBroker = "broker-websocket"
	wsPathProxy  = "pulsar-proxy-websocket"
)

// wsRun is one measured run of one path.
type wsRun struct {
	Path        string  `json:"path"`
	Size        int     `json:"size"`
	Round       int     `json:"round"`
	MsgPerSec   float64 `json:"msg_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"`
	ProxyCPU    float64 `json:"proxy_cpu_sec"`  // the proxy's CPU seconds over the measured window (0 for the broker's path)
	BrokerCPU   float64 `json:"broker_cpu_sec"` // broker 1's
	PayloadGB   float64 `json:"payload_gb"`
	SendErrors  int64   `json:"send_errors"`
	MeasuredSec float64 `json:"measured_sec"`
}

type wsResults struct {
	Config  wsConfig `json:"config"`
	Machine machine  `json:"machine"`
	Runs    []wsRun  `json:"runs"`
	Date    string   `json:"date"`
}

func runWebSocketBench(o options) error {
	cfg := wsFullConfig
	if o.quick {
		cfg = wsQuickConfig
	}
	cfg.Note = o.note
	if err := os.MkdirAll(filepath.Join(o.out, "profiles"), 0o755); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "pulsar-proxy-wsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r, err := wsRig(ctx, dir)
	if err != nil {
		return err
	}
	if r.Owned() {
		defer r.Stop()
	}
	paths, stop, err := wsPaths(ctx, r, dir)
	if err != nil {
		return err
	}
	defer stop()
	res := &wsResults{Config: cfg, Machine: thisMachine(), Date: time.Now().UTC().Format(time.RFC3339)}
	for round := 0; round < cfg.Rounds; round++ {
		for _, size := range cfg.Sizes {
			for _, p := range paths {
				var profile chan error
				if o.profile && round == 0 && p.pprof != "" {
					profile = make(chan error, 1)
					go func() {
						file := filepath.Join(o.out, "profiles", fmt.Sprintf("websocket-%s.cpu.pprof", sizeName(size)))
						profile <- saveProfile(p.pprof, fmt.Sprintf("profile?seconds=%d", int(cfg.WarmupSec+cfg.MeasureSec)), file)
					}()
				}
				run, err := wsMeasure(ctx, r, p, cfg, size, round)
				if profile != nil {
					if perr := <-profile; perr != nil {
						log("profile: %v", perr)
					}
				}
				if err != nil {
					return fmt.Errorf("%s, %d bytes: %w", p.name, size, err)
				}
				log("%-24s %6d B round %d: %8.0f msg/s %7.1f MB/s, CPU proxy %.1fs broker %.1fs", p.name, size, round,
					run.MsgPerSec, run.MBPerSec, run.ProxyCPU, run.BrokerCPU)
				res.Runs = append(res.Runs, run)
			}
		}
	}
	return writeWSResults(res, o.out)
}

// wsRig attaches to PULSAR_PROXY_RIG or starts a rig whose brokers run their WebSocket
// service.
func wsRig(ctx context.Context, dir string) (*rig.Rig, error) {
	if os.Getenv(rig.EnvAttach) != "" {
		return rig.Start(ctx)
	}
	conf := filepath.Join(dir, "websocket.conf")
	if err := os.WriteFile(conf, []byte("webSocketServiceEnabled=true\n"), 0o644); err != nil {
		return nil, err
	}
	return rig.StartWith(ctx, rig.Options{Env: []string{"RIG_BROKER_EXTRA_CONF=" + conf}})
}

// wsPath is one way in: a ws:// base, and the proxy's pid (0: the broker's own service) and
// pprof address.
type wsPath struct {
	name, base, pprof string
	pid               int
}

func wsPaths(ctx context.Context, r *rig.Rig, dir string) ([]wsPath, func(), error) {
	if err := r.CreateNamespace(ctx, benchNamespace, 1); err != nil && !rig.IsStatus(err, 409) {
		return nil, nil, err
	}
	bin, err := proxyproc.Build(dir)
	if err != nil {
		return nil, nil, err
	}
	broker, err := brokerAddr(r.BrokerURL(1))
	if err != nil {
		return nil, nil, err
	}
	p, err := startPulsarProxy(bin, dir, r.BrokerURL(1), broker, wsPathProxy, "websocket:\n  enabled: true\n", -1)
	if err != nil {
		return nil, nil, err
	}
	proxyBase := "ws" + strings.TrimSuffix(strings.TrimPrefix(p.metrics, "http"), "/metrics")
	brokerBase := "ws" + strings.TrimPrefix(r.Brokers[0].HTTP, "http")
	return []wsPath{{name: wsPathBroker, base: brokerBase}, {name: wsPathProxy, base: proxyBase, pprof: p.pprof, pid: p.pid}}, p.stop, nil
}

// wsMeasure runs cfg.Sessions producers of size-byte messages on path p, warms up, then
// measures.
func wsMeasure(ctx context.Context, r *rig.Rig, p wsPath, cfg wsConfig, size, round int) (wsRun, error) {
	brokerPID, err := strconv.Atoi(r.State("BROKER1_PID"))
	if err != nil {
		return wsRun{}, fmt.Errorf("broker 1's pid: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var acked, failed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Sessions)
	msg := wsBenchMessage(size)
	for s := 0; s < cfg.Sessions; s++ {
		topic := fmt.Sprintf("persistent://%s/ws-%s-%d-%d-%d", benchNamespace, p.name, size, round, s)
		if err := r.PlaceTopic(ctx, topic, 1); err != nil {
			return wsRun{}, err
		}
		wg.Go(func() {
			if err := wsProduce(ctx, p.base, topic, msg, cfg.Window, &acked, &failed); err != nil && ctx.Err() == nil {
				errs <- err
				cancel()
			}
		})
	}
	defer wg.Wait()
	time.Sleep(secs(cfg.WarmupSec))
	cpu0p, cpu0b := wsCPU(p.pid), wsCPU(brokerPID)
	n0, f0, t0 := acked.Load(), failed.Load(), time.Now()
	select {
	case <-time.After(secs(cfg.MeasureSec)):
	case err := <-errs:
		return wsRun{}, err
	}
	n1, f1, el := acked.Load(), failed.Load(), time.Since(t0).Seconds()
	cpu1p, cpu1b := wsCPU(p.pid), wsCPU(brokerPID)
	cancel()
	msgs := float64(n1 - n0)
	gb := msgs * float64(size) / 1e9
	return wsRun{Path: p.name, Size: size, Round: round, MsgPerSec: msgs / el, MBPerSec: msgs * float64(size) / el / 1e6,
		ProxyCPU: cpu1p - cpu0p, BrokerCPU: cpu1b - cpu0b, PayloadGB: gb, SendErrors: f1 - f0, MeasuredSec: el}, nil
}

func wsCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	s, _ := cpuSeconds(pid)
	return s
}

// wsBenchMessage is a producer message of size payload bytes, encoded once.
func wsBenchMessage(size int) []byte {
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	return []byte(`{"payload":"` + base64.StdEncoding.EncodeToString(payload) + `"}`)
}

// wsProduce keeps window messages in flight on one producer session until ctx ends.
func wsProduce(ctx context.Context, base, topic string, msg []byte, window int, acked, failed *atomic.Int64) error {
	domain, rest, _ := strings.Cut(topic, "://")
	c, _, err := websocket.Dial(ctx, base+"/ws/v2/producer/"+domain+"/"+rest, nil)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	slots := make(chan struct{}, window)
	go func() {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if bytes.Contains(b, []byte(`"result":"ok"`)) {
				acked.Add(1)
			} else {
				failed.Add(1)
			}
			<-slots
		}
	}()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			return err
		}
	}
}

// wsSummary is the median of a path's runs at one size.
type wsSummary struct {
	msgs, mb, proxyPerGB, brokerPerGB float64
}

func summarizeWS(runs []wsRun, path string, size int) wsSummary {
	var msgs, mb, pg, bg []float64
	for _, r := range runs {
		if r.Path != path || r.Size != size || r.PayloadGB == 0 {
			continue
		}
		msgs, mb = append(msgs, r.MsgPerSec), append(mb, r.MBPerSec)
		pg, bg = append(pg, r.ProxyCPU/r.PayloadGB), append(bg, r.BrokerCPU/r.PayloadGB)
	}
	return wsSummary{wsMedian(msgs), wsMedian(mb), wsMedian(pg), wsMedian(bg)}
}

func wsMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

func writeWSResults(res *wsResults, dir string) error {
	if err := writeJSON(dir, "websocket", res); err != nil {
		return err
	}
	return writeMarkdown(dir, "websocket", renderWS(res))
}

func renderWS(res *wsResults) string {
	var b strings.Builder
	c := res.Config
	fmt.Fprintf(&b, "# WebSocket producers: pulsar-proxy against the broker's own WebSocket service\n\n")
	fmt.Fprintf(&b, "%s, %d CPUs, %s. %d producer sessions, %d messages in flight each; %d round(s) of %.0f s after %.0f s of warm-up, medians. %s\n\n",
		res.Date, res.Machine.CPUs, res.Machine.CPUModel, c.Sessions, c.Window, c.Rounds, c.MeasureSec, c.WarmupSec, c.Note)
	b.WriteString("CPU per GB is CPU seconds per GB of payload produced: the proxy's own, and broker 1's (whose process " +
		"runs its WebSocket service on the broker's path). Ratios are pulsar-proxy over the broker's service.\n\n")
	b.WriteString("| size | path | msg/s | MB/s | proxy CPU s/GB | broker CPU s/GB | total CPU s/GB |\n|---|---|---|---|---|---|---|\n")
	for _, size := range c.Sizes {
		for _, p := range []string{wsPathBroker, wsPathProxy} {
			s := summarizeWS(res.Runs, p, size)
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.1f |\n", sizeLabel(size), p, s.msgs, s.mb, s.proxyPerGB, s.brokerPerGB, s.proxyPerGB+s.brokerPerGB)
		}
	}
	b.WriteString("\n| size | throughput ratio | total CPU per GB ratio |\n|---|---|---|\n")
	for _, size := range c.Sizes {
		br, px := summarizeWS(res.Runs, wsPathBroker, size), summarizeWS(res.Runs, wsPathProxy, size)
		fmt.Fprintf(&b, "| %s | %.2f | %.2f |\n", sizeLabel(size), px.msgs/br.msgs, (px.proxyPerGB+px.brokerPerGB)/(br.proxyPerGB+br.brokerPerGB))
	}
	return b.String()
}
