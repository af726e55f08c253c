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
	"slices"
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
		exitIf(serveEcho())
		return
	}
	o := parseFlags()
	if o.webSocket {
		exitIf(runWebSocketBench(o))
		return
	}
	if o.brokers {
		exitIf(runBrokersBench(o))
		return
	}
	if o.proxyBound {
		cfg, err := proxyBoundConfig(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		runProxyBound(o, cfg)
		return
	}
	cfg := fullConfig
	if o.quick {
		cfg = quickConfig
	}
	cfg.Note = o.note
	if o.rerender {
		exitIf(rerenderResults(o.out))
	} else {
		exitIf(run(cfg, o.out))
	}
	if o.docs {
		exitIf(updateDocs(proxyproc.RepoRoot(), o.out))
	}
}

// exitIf ends the process with exit code 1 when err is set, naming it on stderr.
func exitIf(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the command line's flags.
type options struct {
	quick, docs, proxyBound, keep, rerender, profile, sniOnly, webSocket, brokers, latency bool
	out, note, only, conns, roles, workloads, latencyFractions                             string
	maxConns, proxyCPU, loadCPU, latencyRounds, clients                                    int
}

func parseFlags() options {
	var o options
	flag.BoolVar(&o.quick, "quick", false, "one short round (bench-quick)")
	flag.StringVar(&o.out, "out", filepath.Join(proxyproc.RepoRoot(), "bench", "results"), "results directory")
	flag.StringVar(&o.note, "note", "", "a note on the machine for the report (e.g. that it was shared)")
	flag.BoolVar(&o.docs, "docs", true, "put the results into docs/performance.md and README.md's headline figures (between their markers), rendered from the -out directory's JSON of both benchmarks")
	flag.BoolVar(&o.proxyBound, "proxy-bound", false, "the proxy-bound benchmark (bench-proxy): the paths in front of the benchmark's speaker, the proxy pinned to one CPU")
	flag.IntVar(&o.maxConns, "max-conns", 10000, "proxy-bound: the largest connection count, if the descriptor limit allows it")
	flag.IntVar(&o.proxyCPU, "proxy-cpu", 0, "proxy-bound: the CPU of the proxy under test")
	flag.IntVar(&o.loadCPU, "load-cpu", 1, "proxy-bound: the CPU of the load generator and the speaker")
	flag.StringVar(&o.only, "paths", "", "proxy-bound: only these paths, comma-separated (development runs)")
	flag.StringVar(&o.conns, "conns", "", "proxy-bound: connection counts instead of the mode's, comma-separated, \"max\" for -max-conns (development runs)")
	flag.BoolVar(&o.sniOnly, "sni", false, "proxy-bound: only the SNI section (pulsar-proxy's SNI listener beside HAProxy's req.ssl_sni with splice), results in proxy-bound-sni.{json,md}")
	flag.BoolVar(&o.keep, "keep", false, "proxy-bound: keep the work directory with the proxies' configs and logs")
	flag.StringVar(&o.roles, "roles", "", "proxy-bound: producer, consumer or both (comma-separated) instead of the mode's")
	flag.StringVar(&o.workloads, "workloads", "", "proxy-bound: workloads instead of the mode's, comma-separated labels without spaces (\"1KiBx100,100B,1KiB,64KiB,1MiB\"; development runs)")
	flag.BoolVar(&o.rerender, "rerender", false, "no run: the Markdown, the chart and (with -docs) the pages' figures written anew from the -out directory's JSON (after a change of the report)")
	flag.StringVar(&o.latencyFractions, "latency-fractions", "0.5,0.1", "proxy-bound: the latency runs' rates as fractions of the direct path's, comma-separated")
	flag.BoolVar(&o.profile, "profile", false, "proxy-bound: CPU profiles of pulsar-proxy (passthrough and framed) over round 0 of the goal's cells, into the -out directory's profiles folder (development runs: the profiler's cost lands in those rounds' CPU figures)")
	flag.BoolVar(&o.webSocket, "websocket", false, "the WebSocket benchmark (bench-websocket): producers through pulsar-proxy's WebSocket API and the broker's own service")
	flag.BoolVar(&o.latency, "latency", false, "proxy-bound: only the paired latency rounds (bench-latency): added p99 at half the direct rate, direct, pulsar-proxy's three paths and HAProxy with splice, results in latency.{json,md}")
	flag.IntVar(&o.latencyRounds, "latency-rounds", 7, "proxy-bound -latency: the paired rounds")
	flag.IntVar(&o.clients, "clients", 0, "brokers: the producer clients instead of the mode's (within the descriptor limit)")
	flag.BoolVar(&o.brokers, "brokers", false, "the brokers' side of multiplexing (bench-brokers): producer clients at a fixed rate through pulsar-proxy framed and multiplexed, broker 1's memory, threads and CPU")
	flag.Parse()
	return o
}

// proxyBoundConfig is the proxy-bound mode's config with the flags applied; the error names a
// flag whose value is not valid.
func proxyBoundConfig(o options) (proxyConfig, error) {
	cfg := proxyFullConfig
	if o.quick {
		cfg = proxyQuickConfig
	}
	cfg.Note, cfg.ProxyCPU, cfg.LoadCPU, cfg.Profile, cfg.SNIOnly = o.note, o.proxyCPU, o.loadCPU, o.profile, o.sniOnly
	var err error
	if cfg.LatencyFractions, err = parseFractions(o.latencyFractions); err != nil {
		return cfg, err
	}
	if o.only != "" {
		cfg.Only = strings.Split(o.only, ",")
	}
	if o.roles != "" {
		cfg.Roles = strings.Split(o.roles, ",")
	}
	if o.conns != "" {
		if cfg.Conns, err = parseConns(o.conns); err != nil {
			return cfg, err
		}
	}
	if o.workloads != "" {
		if cfg.Workloads, err = parseWorkloads(o.workloads); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// parseWorkloads reads -workloads: the full mode's workloads by their labels, spaces left out.
func parseWorkloads(s string) ([]workload, error) {
	var out []workload
	for _, name := range strings.Split(s, ",") {
		i := slices.IndexFunc(proxyFullConfig.Workloads, func(w workload) bool { return w.flagName() == name })
		if i < 0 {
			return nil, fmt.Errorf("-workloads: %q is none of the workloads", name)
		}
		out = append(out, proxyFullConfig.Workloads[i])
	}
	return out, nil
}

// parseFractions reads -latency-fractions: fractions in (0, 1], comma-separated.
func parseFractions(s string) ([]float64, error) {
	var fractions []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || v > 1 {
			return nil, fmt.Errorf("-latency-fractions: %q is not a fraction in (0, 1]", f)
		}
		fractions = append(fractions, v)
	}
	return fractions, nil
}

// parseConns reads -conns: connection counts, comma-separated, "max" for the largest.
func parseConns(s string) ([]int, error) {
	var conns []int
	for _, c := range strings.Split(s, ",") {
		n, err := strconv.Atoi(c)
		if c == "max" {
			n, err = maxConnsPlaceholder, nil
		}
		if err != nil || n == 0 || n < maxConnsPlaceholder {
			return nil, fmt.Errorf("-conns: %q is not a connection count", c)
		}
		conns = append(conns, n)
	}
	return conns, nil
}

// runProxyBound runs the proxy-bound benchmark (or re-renders its results), then puts its
// figures into the pages if asked to.
func runProxyBound(o options, cfg proxyConfig) {
	switch {
	case o.latency && o.rerender:
		exitIf(rerenderLatency(o.out))
		return
	case o.latency:
		exitIf(runLatencyBench(cfg, o.out, o.latencyRounds))
		return
	}
	if o.rerender {
		exitIf(rerenderProxyResults(o.out))
	} else {
		exitIf(runProxyBench(cfg, o.out, o.maxConns, o.keep))
	}
	if o.docs && !o.sniOnly {
		exitIf(updateDocs(proxyproc.RepoRoot(), o.out))
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
	sb, err := newSideBySide(ctx, r, cfg, outDir)
	if err != nil {
		return err
	}
	log("starting the paths")
	err = sb.startPaths(dir)
	defer sb.stopPaths()
	if err != nil {
		return err
	}
	if err := sb.measure(); err != nil {
		return err
	}
	sb.res.Goals = goals(sb.res)
	sb.res.DurationSec = time.Since(began).Seconds()
	if err := writeResults(sb.res, outDir); err != nil {
		return err
	}
	log("results in %s (%.0fs)", outDir, sb.res.DurationSec)
	return nil
}

// sideBySide is a side-by-side run under way: the rig, the paths to its broker 1 and what they
// measured so far.
type sideBySide struct {
	ctx        context.Context
	rig        *rig.Rig
	cfg        config
	outDir     string
	broker     string // host:port of broker 1
	topics     int    // topics made so far
	paths      []*path
	res        *results
	warm, meas time.Duration
}

// newSideBySide prepares a run against r's broker 1: the namespace, one bundle.
func newSideBySide(ctx context.Context, r *rig.Rig, cfg config, outDir string) (*sideBySide, error) {
	broker, err := brokerAddr(r.BrokerURL(1))
	if err != nil {
		return nil, err
	}
	if err := r.CreateNamespace(ctx, benchNamespace, 1); err != nil && !rig.IsStatus(err, 409) {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	return &sideBySide{ctx: ctx, rig: r, cfg: cfg, outDir: outDir, broker: broker,
		warm: secs(cfg.WarmupSec), meas: secs(cfg.MeasureSec)}, nil
}

// newTopic names a new topic for label, placed on broker 1.
func (sb *sideBySide) newTopic(label string) (string, error) {
	sb.topics++
	t := fmt.Sprintf("persistent://%s/%s-%d-%d", benchNamespace, label, time.Now().Unix(), sb.topics)
	ld, err := sb.rig.Lookup(sb.ctx, t)
	if err != nil || ld.BrokerURL != sb.rig.BrokerURL(1) {
		// The namespace has one bundle: placing one topic on broker 1 places them all.
		if err := sb.rig.PlaceTopic(sb.ctx, t, 1); err != nil {
			return "", fmt.Errorf("place %s on broker 1: %w", t, err)
		}
	}
	return t, nil
}

// startPaths starts every path to broker 1: direct, pulsar-proxy (passthrough and framed), the
// Java proxy, HAProxy without and with splice. Those started stay in sb.paths on an error.
func (sb *sideBySide) startPaths(dir string) error {
	sb.paths = []*path{directPath(sb.broker)}
	for _, v := range []struct {
		name        string
		passthrough bool
	}{{pathPulsarProxy, true}, {pathPulsarProxyFramed, false}} {
		pp, err := pulsarProxyPath(dir, sb.rig.BrokerURL(1), sb.broker, v.name, v.passthrough)
		if err != nil {
			return err
		}
		sb.paths = append(sb.paths, pp)
	}
	jp, err := javaProxyPath(sb.ctx, dir, javaTarget{cluster: sb.rig.Cluster, brokerURL: sb.rig.BrokerURL(1), brokerHTTP: sb.rig.BrokerHTTP(1)}, -1)
	if err != nil {
		return err
	}
	sb.paths = append(sb.paths, jp)
	for _, h := range []struct {
		name   string
		splice bool
	}{{pathHAProxy, false}, {pathHAProxySplice, true}} {
		hp, err := haproxyPath(dir, sb.broker, h.name, haproxyOptions{splice: h.splice, cpu: -1})
		if err != nil {
			return err
		}
		sb.paths = append(sb.paths, hp)
	}
	return nil
}

func (sb *sideBySide) stopPaths() {
	for _, p := range sb.paths {
		p.stop()
	}
}

// measure runs throughput, latency and idle connections through every path, then sums up
// each path's figures and saves pulsar-proxy's allocation profiles.
func (sb *sideBySide) measure() error {
	sb.res = &results{Date: time.Now().UTC().Format(time.RFC3339), Machine: thisMachine(), Config: sb.cfg}
	for _, p := range sb.paths {
		sb.res.Paths = append(sb.res.Paths, p.Name)
	}
	if err := sb.throughputRuns(); err != nil {
		return err
	}
	lat, err := sb.latencyRuns()
	if err != nil {
		return err
	}
	idle, err := sb.idleRuns()
	if err != nil {
		return err
	}
	for _, p := range sb.paths {
		sb.res.Summary = append(sb.res.Summary, sb.summarize(p, lat[p.Name], idle))
	}
	sb.saveAllocProfiles()
	return nil
}

// throughputRuns measures every path's throughput and CPU at each size, the paths' order
// rotated every round.
func (sb *sideBySide) throughputRuns() error {
	for _, size := range sb.cfg.MessageSizes {
		for round := range sb.cfg.Rounds {
			for i := range sb.paths {
				p := sb.paths[(i+round)%len(sb.paths)]
				if sb.ctx.Err() != nil {
					return sb.ctx.Err()
				}
				t, err := sb.measureThroughput(p, size, round)
				if err != nil {
					return err
				}
				sb.res.Throughput = append(sb.res.Throughput, t)
				log("throughput %-12s %6d B round %d: %9.0f msg/s %8.1f MB/s cpu %.2fs", p.Name, size, round, t.MsgsPerSec, t.MBPerSec, t.CPUSeconds)
			}
		}
	}
	return nil
}

// measureThroughput runs one throughput load of size through p on a new topic, with the
// proxy's CPU seconds over the measured interval.
func (sb *sideBySide) measureThroughput(p *path, size, round int) (throughputRun, error) {
	topic, err := sb.newTopic(fmt.Sprintf("tput-%s-%d", p.Name, size))
	if err != nil {
		return throughputRun{}, err
	}
	var cpu0, cpu1 float64
	l := load{ep: p.ep, topic: topic, size: size, warmup: sb.warm, measure: sb.meas}
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
				sb.startProfile(profiled, p, size)
			}
		}
	}
	lr, err := l.run()
	if perr := <-profiled; perr != nil {
		log("profile of %s: %v", p.Name, perr)
	}
	if err != nil {
		return throughputRun{}, fmt.Errorf("throughput %s %d B: %w", p.Name, size, err)
	}
	t := throughputRun{Path: p.Name, Size: size, Round: round, Messages: lr.Messages, Bytes: lr.Bytes,
		Seconds: lr.Seconds, MsgsPerSec: float64(lr.Messages) / lr.Seconds, MBPerSec: float64(lr.Bytes) / lr.Seconds / 1e6}
	if p.pid != 0 {
		t.CPUSeconds = cpu1 - cpu0
	}
	return t, nil
}

// startProfile takes a CPU profile of p over the measured interval, in the background; done
// (holding the last profile's error) gets this one's when it is written.
func (sb *sideBySide) startProfile(done chan error, p *path, size int) {
	<-done
	file := filepath.Join(sb.outDir, "profiles", fmt.Sprintf("%s-%s.cpu.pprof", p.Name, sizeName(size)))
	go func() {
		done <- saveProfile(p.pprof, fmt.Sprintf("profile?seconds=%d", int(sb.cfg.MeasureSec)), file)
	}()
}

// latencyRuns measures every path's round trips at half the direct path's 1 KiB throughput.
func (sb *sideBySide) latencyRuns() (map[string][]time.Duration, error) {
	direct := medianOf(sb.res.Throughput, pathDirect, 1<<10, func(t throughputRun) float64 { return t.MsgsPerSec })
	sb.res.LatencyRate = direct / 2
	lat := map[string][]time.Duration{}
	for round := range sb.cfg.Rounds {
		for i := range sb.paths {
			p := sb.paths[(i+round)%len(sb.paths)]
			topic, err := sb.newTopic("lat-" + p.Name)
			if err != nil {
				return nil, err
			}
			lr, err := load{ep: p.ep, topic: topic, size: 1 << 10, rate: sb.res.LatencyRate, warmup: sb.warm, measure: sb.meas}.run()
			if err != nil {
				return nil, fmt.Errorf("latency %s: %w", p.Name, err)
			}
			lat[p.Name] = append(lat[p.Name], lr.Latencies...)
			log("latency    %-12s round %d: %d samples at %.0f msg/s", p.Name, round, len(lr.Latencies), sb.res.LatencyRate)
		}
	}
	return lat, nil
}

// idleRuns measures every proxy's RSS growth per idle connection, in lookup mode and in
// direct mode.
func (sb *sideBySide) idleRuns() (map[string][2]float64, error) {
	idle := map[string][2]float64{}
	for _, p := range sb.paths[1:] {
		var perConn [2]float64
		for m, withTarget := range []bool{false, true} {
			kib, err := idleCost(p, sb.cfg.IdleConns, withTarget)
			if err != nil {
				return nil, fmt.Errorf("idle connections through %s: %w", p.Name, err)
			}
			perConn[m] = kib
			log("idle       %-12s %s mode: %.1f KiB per connection", p.Name, []string{"lookup", "direct"}[m], kib)
		}
		idle[p.Name] = perConn
	}
	return idle, nil
}

// summarize is p's summary: median throughput per size, latency percentiles over lat (which
// it sorts), and for a proxy its CPU s/GB, peak RSS and idle cost.
func (sb *sideBySide) summarize(p *path, lat []time.Duration, idle map[string][2]float64) pathSummary {
	s := pathSummary{Path: p.Name}
	for _, size := range sb.cfg.MessageSizes {
		s.Throughput = append(s.Throughput, sizeThroughput{Size: size,
			MsgsPerSec: medianOf(sb.res.Throughput, p.Name, size, func(t throughputRun) float64 { return t.MsgsPerSec }),
			MBPerSec:   medianOf(sb.res.Throughput, p.Name, size, func(t throughputRun) float64 { return t.MBPerSec })})
	}
	sortDurations(lat)
	s.Latency = latency{Samples: len(lat), P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), P999: percentile(lat, 0.999)}
	if p.pid == 0 {
		return s
	}
	var cpu, bytes float64
	for _, t := range sb.res.Throughput {
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
	return s
}

// saveAllocProfiles saves pulsar-proxy's allocation profiles over the whole run.
func (sb *sideBySide) saveAllocProfiles() {
	for _, p := range sb.paths {
		if p.pprof != "" {
			if err := saveProfile(p.pprof, "allocs", filepath.Join(sb.outDir, "profiles", p.Name+".allocs.pprof")); err != nil {
				log("allocation profile: %v", err)
			}
		}
	}
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
