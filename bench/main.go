//go:build linux

// Command bench measures pulsar-proxy side by side with a direct connection, the Java Pulsar
// proxy and HAProxy in TCP mode (without and with splice), on one broker of the test rig, and
// writes the results to bench/results as JSON, Markdown and a PNG chart. `make bench` runs it
// in full, `make bench-quick` in a few minutes. With -proxy-bound (`make bench-proxy`) it
// measures the same paths in front of the benchmark's own Pulsar speaker instead, the proxy
// pinned to one CPU (proxybench.go).
//
// Every path gets the same load from the same generator (loadgen.go), in turn, rounds
// interleaved so that drift of a shared machine spreads over all paths alike:
//   - throughput: one producer (1,000 SENDs in flight) and one consumer, 1 KiB and 64 KiB
//     messages, for a fixed time; msg/s and MB/s consumed;
//   - CPU: the proxy process's user+system seconds (/proc/PID/stat) over the measured
//     interval, per GB of payload through it (each message crosses twice: in and out);
//   - latency: 1 KiB messages at half of the direct path's 1 KiB throughput, send to receive;
//   - memory: peak RSS (VmHWM), and RSS growth per idle connection (1,000 connections that
//     only CONNECT, in lookup mode and in direct mode).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

func main() {
	if os.Getenv(echoServerEnv) == "1" {
		if err := serveEcho(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	quick := flag.Bool("quick", false, "one short round (bench-quick)")
	out := flag.String("out", filepath.Join(proxyproc.RepoRoot(), "bench", "results"), "results directory")
	note := flag.String("note", "", "a note on the machine for the report (e.g. that it was shared)")
	readme := flag.Bool("readme", true, "put the results table into README.md (between its bench markers)")
	proxyBound := flag.Bool("proxy-bound", false, "the proxy-bound benchmark (bench-proxy): the paths in front of the benchmark's speaker, the proxy pinned to one CPU")
	maxConns := flag.Int("max-conns", 10000, "proxy-bound: the largest connection count, if the descriptor limit allows it")
	proxyCPU := flag.Int("proxy-cpu", 0, "proxy-bound: the CPU of the proxy under test")
	loadCPU := flag.Int("load-cpu", 1, "proxy-bound: the CPU of the load generator and the speaker")
	only := flag.String("paths", "", "proxy-bound: only these paths, comma-separated (development runs)")
	conns := flag.String("conns", "", "proxy-bound: connection counts instead of the mode's, comma-separated, \"max\" for -max-conns (development runs)")
	keep := flag.Bool("keep", false, "proxy-bound: keep the work directory with the proxies' configs and logs")
	roles := flag.String("roles", "", "proxy-bound: producer, consumer or both (comma-separated) instead of the mode's")
	rerender := flag.Bool("rerender", false, "proxy-bound: no run; the summary, Markdown, chart and README table written anew from the -out directory's proxy-bound.json (after a change of the report)")
	latencyFractions := flag.String("latency-fractions", "0.5,0.1", "proxy-bound: the latency runs' rates as fractions of the direct path's, comma-separated")
	profile := flag.Bool("profile", false, "proxy-bound: CPU profiles of pulsar-proxy (passthrough and framed) over round 0 of the goal's cells, into the -out directory's profiles folder (development runs: the profiler's cost lands in those rounds' CPU figures)")
	flag.Parse()
	if *proxyBound {
		cfg := proxyFullConfig
		if *quick {
			cfg = proxyQuickConfig
		}
		cfg.Note, cfg.ProxyCPU, cfg.LoadCPU, cfg.Profile = *note, *proxyCPU, *loadCPU, *profile
		cfg.LatencyFractions = nil
		for _, f := range strings.Split(*latencyFractions, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 || v > 1 {
				fmt.Fprintf(os.Stderr, "bench: -latency-fractions: %q is not a fraction in (0, 1]\n", f)
				os.Exit(2)
			}
			cfg.LatencyFractions = append(cfg.LatencyFractions, v)
		}
		if *only != "" {
			cfg.Only = strings.Split(*only, ",")
		}
		if *roles != "" {
			cfg.Roles = strings.Split(*roles, ",")
		}
		if *conns != "" {
			cfg.Conns = nil
			for _, c := range strings.Split(*conns, ",") {
				n, err := strconv.Atoi(c)
				if c == "max" {
					n, err = maxConnsPlaceholder, nil
				}
				if err != nil || n == 0 || n < maxConnsPlaceholder {
					fmt.Fprintf(os.Stderr, "bench: -conns: %q is not a connection count\n", c)
					os.Exit(2)
				}
				cfg.Conns = append(cfg.Conns, n)
			}
		}
		run := func() error { return runProxyBench(cfg, *out, *maxConns, *keep) }
		if *rerender {
			run = func() error { return rerenderProxyResults(*out) }
		}
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if *readme {
			if err := updateProxyReadme(filepath.Join(proxyproc.RepoRoot(), "README.md"), filepath.Join(*out, proxyResultsName+".md")); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				os.Exit(1)
			}
		}
		return
	}
	cfg := fullConfig
	if *quick {
		cfg = quickConfig
	}
	cfg.Note = *note
	if err := run(cfg, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if *readme {
		if err := updateReadme(filepath.Join(proxyproc.RepoRoot(), "README.md"), filepath.Join(*out, "latest.md")); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
}

type config struct {
	Mode         string  `json:"mode"`
	Rounds       int     `json:"rounds"`
	WarmupSec    float64 `json:"warmupSeconds"`
	MeasureSec   float64 `json:"measureSeconds"`
	IdleConns    int     `json:"idleConnections"`
	MessageSizes []int   `json:"messageSizes"`
	Note         string  `json:"note,omitempty"`
}

var (
	fullConfig  = config{Mode: "full", Rounds: 3, WarmupSec: 3, MeasureSec: 15, IdleConns: 1000, MessageSizes: []int{1 << 10, 64 << 10}}
	quickConfig = config{Mode: "quick", Rounds: 1, WarmupSec: 1, MeasureSec: 4, IdleConns: 1000, MessageSizes: []int{1 << 10, 64 << 10}}
)

func run(cfg config, outDir string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	began := time.Now()
	r, err := rig.Start(ctx)
	if err != nil {
		return err
	}
	if r.Owned() {
		defer r.Stop()
	}
	if err := os.MkdirAll(filepath.Join(outDir, "profiles"), 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pulsar-proxy-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	broker, err := brokerAddr(r.BrokerURL(1))
	if err != nil {
		return err
	}
	ns := "public/bench"
	if err := r.CreateNamespace(ctx, ns, 1); err != nil && !rig.IsStatus(err, 409) {
		return fmt.Errorf("namespace: %w", err)
	}
	topicN := 0
	newTopic := func(label string) (string, error) {
		topicN++
		t := fmt.Sprintf("persistent://%s/%s-%d-%d", ns, label, time.Now().Unix(), topicN)
		ld, err := r.Lookup(ctx, t)
		if err != nil || ld.BrokerURL != r.BrokerURL(1) {
			// The namespace has one bundle: placing one topic on broker 1 places them all.
			if err := r.PlaceTopic(ctx, t, 1); err != nil {
				return "", fmt.Errorf("place %s on broker 1: %w", t, err)
			}
		}
		return t, nil
	}

	log("starting the paths")
	paths := []*path{directPath(broker)}
	stopAll := func() {
		for _, p := range paths {
			p.stop()
		}
	}
	defer stopAll()
	for _, v := range []struct {
		name        string
		passthrough bool
	}{{pathPulsarProxy, true}, {pathPulsarProxyFramed, false}} {
		pp, err := pulsarProxyPath(dir, r.BrokerURL(1), broker, v.name, v.passthrough)
		if err != nil {
			return err
		}
		paths = append(paths, pp)
	}
	jp, err := javaProxyPath(ctx, dir, javaTarget{cluster: r.Cluster, brokerURL: r.BrokerURL(1), brokerHTTP: r.BrokerHTTP(1)}, -1)
	if err != nil {
		return err
	}
	paths = append(paths, jp)
	for _, h := range []struct {
		name   string
		splice bool
	}{{pathHAProxy, false}, {pathHAProxySplice, true}} {
		hp, err := haproxyPath(dir, broker, h.name, haproxyOptions{splice: h.splice, cpu: -1})
		if err != nil {
			return err
		}
		paths = append(paths, hp)
	}

	res := &results{Date: time.Now().UTC().Format(time.RFC3339), Machine: thisMachine(), Config: cfg}
	for _, p := range paths {
		res.Paths = append(res.Paths, p.Name)
	}
	warm, meas := secs(cfg.WarmupSec), secs(cfg.MeasureSec)

	// Throughput and CPU.
	for _, size := range cfg.MessageSizes {
		for round := range cfg.Rounds {
			for i := range paths {
				p := paths[(i+round)%len(paths)]
				if ctx.Err() != nil {
					return ctx.Err()
				}
				topic, err := newTopic(fmt.Sprintf("tput-%s-%d", p.Name, size))
				if err != nil {
					return err
				}
				var cpu0, cpu1 float64
				l := load{ep: p.ep, topic: topic, size: size, warmup: warm, measure: meas}
				profiled := make(chan error, 1)
				profiled <- nil
				if p.pid != 0 {
					l.onMeasure = func(start bool) {
						v, _ := cpuSeconds(p.pid)
						if start {
							cpu0 = v
						} else {
							cpu1 = v
						}
						// The first round of each size also takes a CPU profile of pulsar-proxy.
						if start && p.pprof != "" && round == 0 {
							<-profiled
							file := filepath.Join(outDir, "profiles", fmt.Sprintf("%s-%s.cpu.pprof", p.Name, sizeName(size)))
							go func() {
								profiled <- saveProfile(p.pprof, fmt.Sprintf("profile?seconds=%d", int(cfg.MeasureSec)), file)
							}()
						}
					}
				}
				lr, err := l.run()
				if perr := <-profiled; perr != nil {
					log("profile of %s: %v", p.Name, perr)
				}
				if err != nil {
					return fmt.Errorf("throughput %s %d B: %w", p.Name, size, err)
				}
				t := throughputRun{Path: p.Name, Size: size, Round: round, Messages: lr.Messages, Bytes: lr.Bytes,
					Seconds: lr.Seconds, MsgsPerSec: float64(lr.Messages) / lr.Seconds, MBPerSec: float64(lr.Bytes) / lr.Seconds / 1e6}
				if p.pid != 0 {
					t.CPUSeconds = cpu1 - cpu0
				}
				res.Throughput = append(res.Throughput, t)
				log("throughput %-12s %6d B round %d: %9.0f msg/s %8.1f MB/s cpu %.2fs", p.Name, size, round, t.MsgsPerSec, t.MBPerSec, t.CPUSeconds)
			}
		}
	}

	// Latency at half the direct 1 KiB maximum.
	direct := medianOf(res.Throughput, pathDirect, 1<<10, func(t throughputRun) float64 { return t.MsgsPerSec })
	res.LatencyRate = direct / 2
	lat := map[string][]time.Duration{}
	for round := range cfg.Rounds {
		for i := range paths {
			p := paths[(i+round)%len(paths)]
			topic, err := newTopic("lat-" + p.Name)
			if err != nil {
				return err
			}
			lr, err := load{ep: p.ep, topic: topic, size: 1 << 10, rate: res.LatencyRate, warmup: warm, measure: meas}.run()
			if err != nil {
				return fmt.Errorf("latency %s: %w", p.Name, err)
			}
			lat[p.Name] = append(lat[p.Name], lr.Latencies...)
			log("latency    %-12s round %d: %d samples at %.0f msg/s", p.Name, round, len(lr.Latencies), res.LatencyRate)
		}
	}

	// Idle connections.
	idle := map[string][2]float64{}
	for _, p := range paths[1:] {
		var perConn [2]float64
		for m, withTarget := range []bool{false, true} {
			kib, err := idleCost(p, cfg.IdleConns, withTarget)
			if err != nil {
				return fmt.Errorf("idle connections through %s: %w", p.Name, err)
			}
			perConn[m] = kib
			log("idle       %-12s %s mode: %.1f KiB per connection", p.Name, []string{"lookup", "direct"}[m], kib)
		}
		idle[p.Name] = perConn
	}

	for _, p := range paths {
		s := pathSummary{Path: p.Name}
		for _, size := range cfg.MessageSizes {
			s.Throughput = append(s.Throughput, sizeThroughput{Size: size,
				MsgsPerSec: medianOf(res.Throughput, p.Name, size, func(t throughputRun) float64 { return t.MsgsPerSec }),
				MBPerSec:   medianOf(res.Throughput, p.Name, size, func(t throughputRun) float64 { return t.MBPerSec })})
		}
		d := lat[p.Name]
		sortDurations(d)
		s.Latency = latency{Samples: len(d), P50: percentile(d, 0.50), P99: percentile(d, 0.99), P999: percentile(d, 0.999)}
		if p.pid != 0 {
			var cpu, bytes float64
			for _, t := range res.Throughput {
				if t.Path == p.Name {
					cpu += t.CPUSeconds
					bytes += 2 * float64(t.Bytes)
				}
			}
			s.CPUSecondsPerGB = ptr(cpu / (bytes / 1e9))
			if hwm, err := memKiB(p.pid, "VmHWM"); err == nil {
				s.PeakRSSMiB = ptr(float64(hwm) / 1024)
			}
			if v, ok := idle[p.Name]; ok {
				s.IdleKiBPerConnLookup, s.IdleKiBPerConnDirect = ptr(v[0]), ptr(v[1])
			}
		}
		res.Summary = append(res.Summary, s)
	}
	for _, p := range paths {
		if p.pprof != "" {
			if err := saveProfile(p.pprof, "allocs", filepath.Join(outDir, "profiles", p.Name+".allocs.pprof")); err != nil {
				log("allocation profile: %v", err)
			}
		}
	}
	res.Goals = goals(res)
	res.DurationSec = time.Since(began).Seconds()
	if err := writeResults(res, outDir); err != nil {
		return err
	}
	log("results in %s (%.0fs)", outDir, res.DurationSec)
	return nil
}

// idleCost opens n connections through p that only CONNECT (lookup mode, or direct mode with
// proxy_to_broker_url when withTarget) and returns the RSS growth per connection in KiB.
func idleCost(p *path, n int, withTarget bool) (float64, error) {
	settle := func() (int64, error) {
		time.Sleep(2 * time.Second)
		return memKiB(p.pid, "VmRSS")
	}
	before, err := settle()
	if err != nil {
		return 0, err
	}
	closeAll, err := idleConns(p.ep, n, withTarget)
	if err != nil {
		return 0, err
	}
	after, err := settle()
	closeAll()
	time.Sleep(time.Second)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

func medianOf(runs []throughputRun, path string, size int, v func(throughputRun) float64) float64 {
	var xs []float64
	for _, t := range runs {
		if t.Path == path && t.Size == size {
			xs = append(xs, v(t))
		}
	}
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func ptr(f float64) *float64 { return &f }

func log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func thisMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func sizeName(n int) string { return strings.ReplaceAll(sizeLabel(n), " ", "") }
