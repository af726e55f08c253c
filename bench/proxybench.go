//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/bench/speaker"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// The proxy-bound benchmark (`make bench-proxy`): the same paths as the side-by-side
// benchmark, but in front of the benchmark's own Pulsar speaker (bench/speaker), which answers
// at once, so that the path, not the broker, is the bottleneck. The proxy under test runs on
// one CPU (taskset), the load generator and the speaker on the other (sched_setaffinity of
// this process); one path runs at a time.

// proxyConfig is what one run measured.
type proxyConfig struct {
	Mode       string     `json:"mode"`
	Rounds     int        `json:"rounds"`
	WarmupSec  float64    `json:"warmupSeconds"`
	MeasureSec float64    `json:"measureSeconds"`
	Roles      []string   `json:"roles"`
	Conns      []int      `json:"connections"`
	Workloads  []workload `json:"workloads"`
	// MaxConns is the largest connection count: as close to 10,000 as the descriptor limit
	// lets every process hold two descriptors a connection (the proxy: client and broker
	// side; this process: the client side and the speaker's).
	MaxConns          int      `json:"maxConnections"`
	DescriptorLimit   int      `json:"descriptorLimit"`
	HeadlineConns     int      `json:"headlineConnections"`
	LatencyWorkload   workload `json:"latencyWorkload"`
	LatencyTickMicros int      `json:"latencyTickMicros"`
	IdleConns         []int    `json:"idleConnections"`
	// GoalRounds: the cells of the framed-vs-passthrough goal (headline connections, batched
	// 1 KiB and 64 KiB, those two paths) run this many rounds in all, not Rounds: their ratio
	// is the goal, and one round on a shared machine moves it by a tenth or more.
	GoalRounds int `json:"goalRounds,omitempty"`
	// LatencyFractions of the direct path's rate are the latency runs' rates: the issue's
	// half, and a light load.
	LatencyFractions []float64 `json:"latencyFractions"`
	// SNIOnly runs the SNI section alone (development runs: -sni).
	SNIOnly bool `json:"-"`
	// Only these paths ("" = all of them); for development runs.
	Only []string `json:"only,omitempty"`
	// Profile: CPU profiles of pulsar-proxy, passthrough and framed, over round 0 of the
	// goal's cells, into the results' profiles folder. For development runs (what is left):
	// the profiler's own cost lands in those rounds' CPU figures.
	Profile    bool `json:"profile,omitempty"`
	profileDir string
	ProxyCPU   int    `json:"proxyCpu"`
	LoadCPU    int    `json:"loadCpu"`
	Note       string `json:"note,omitempty"`
}

var (
	batched1KiB = workload{Size: 1 << 10, Batch: 100}
	plain100B   = workload{Size: 100, Batch: 1}
	plain1KiB   = workload{Size: 1 << 10, Batch: 1}
	plain64KiB  = workload{Size: 64 << 10, Batch: 1}
	plain1MiB   = workload{Size: 1 << 20, Batch: 1}

	proxyFullConfig = proxyConfig{Mode: "full", Rounds: 3, WarmupSec: 1, MeasureSec: 2,
		Roles: []string{roleProducer, roleConsumer}, Conns: []int{1, 100, maxConnsPlaceholder},
		Workloads:     []workload{batched1KiB, plain100B, plain1KiB, plain64KiB, plain1MiB},
		HeadlineConns: 100, LatencyWorkload: plain1KiB, LatencyTickMicros: 200, LatencyFractions: []float64{0.5, 0.1}, IdleConns: []int{1000, maxConnsPlaceholder},
		GoalRounds: 9}
	proxyQuickConfig = proxyConfig{Mode: "quick", Rounds: 1, WarmupSec: 0.5, MeasureSec: 1.5,
		Roles: []string{roleProducer, roleConsumer}, Conns: []int{1, 100},
		Workloads:     []workload{batched1KiB, plain1KiB, plain64KiB},
		HeadlineConns: 100, LatencyWorkload: plain1KiB, LatencyTickMicros: 200, LatencyFractions: []float64{0.5, 0.1}, IdleConns: []int{1000},
		GoalRounds: 3}
)

// maxConnsPlaceholder in a config's counts stands for MaxConns.
const maxConnsPlaceholder = -1

// descriptorReserve: descriptors kept aside in each process beyond two a connection (the
// proxies' listeners, pipes that splicing holds for a moment, the JVM's jars).
const descriptorReserve = 2000

func runProxyBench(cfg proxyConfig, outDir string, wantConns int, keep bool) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	began := time.Now()
	cfg, err := resolveProxyConfig(cfg, outDir, wantConns)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pulsar-proxy-bench-proxy-")
	if err != nil {
		return err
	}
	if keep {
		log("work directory (configs and logs of the proxies) kept: %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin, idlemem, err := buildProxyBinaries(dir)
	if err != nil {
		return err
	}
	res := newProxyResults(cfg)
	sp, err := pinnedSpeaker(cfg.LoadCPU)
	if err != nil {
		return err
	}
	defer sp.Close()
	log("speaker on %s; connections %v (descriptor limit %d)", sp.Addr(), cfg.Conns, cfg.DescriptorLimit)
	if !cfg.SNIOnly {
		if err := measureProxyPaths(ctx, res, sp, dir, bin); err != nil {
			return err
		}
	}
	if err := measureSNI(ctx, cfg, dir, bin, outDir); err != nil {
		return fmt.Errorf("the SNI section: %w", err)
	}
	if cfg.SNIOnly {
		return nil
	}
	if len(cfg.IdleConns) > 0 {
		measureIdleMemory(res, idlemem, bin)
	}
	res.LoadAvgAfter = loadavg()
	summarizeProxy(res)
	res.Goals = proxyGoals(res)
	res.DurationSec = time.Since(began).Seconds()
	if err := writeProxyResults(res, outDir); err != nil {
		return err
	}
	log("results in %s (%.0fs)", outDir, res.DurationSec)
	return nil
}

// resolveProxyConfig checks the CPUs to pin to, makes the profiles' folder if asked for, and
// sets the connection counts the descriptor limit allows.
func resolveProxyConfig(cfg proxyConfig, outDir string, wantConns int) (proxyConfig, error) {
	if err := checkPinning(cfg.ProxyCPU, cfg.LoadCPU); err != nil {
		return cfg, err
	}
	if cfg.Profile {
		cfg.profileDir = filepath.Join(outDir, "profiles")
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return cfg, err
		}
	}
	cfg.DescriptorLimit = descriptorLimit()
	cfg.MaxConns = min(wantConns, (cfg.DescriptorLimit-descriptorReserve)/2)
	cfg.Conns = resolveConns(cfg.Conns, cfg.MaxConns)
	cfg.IdleConns = resolveConns(cfg.IdleConns, cfg.MaxConns)
	return cfg, nil
}

// buildProxyBinaries builds pulsar-proxy and bench/idlemem into dir/bin, before this process
// is pinned to its one CPU.
func buildProxyBinaries(dir string) (bin, idlemem string, err error) {
	log("building pulsar-proxy and bench/idlemem")
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", "", err
	}
	bin, err = proxyproc.Build(binDir)
	if err != nil {
		return "", "", err
	}
	idlemem = filepath.Join(binDir, "idlemem")
	build := exec.Command("go", "build", "-o", idlemem, "./idlemem")
	build.Dir = filepath.Join(proxyproc.RepoRoot(), "bench")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build idlemem: %v\n%s", err, out)
	}
	return bin, idlemem, nil
}

// newProxyResults starts the results of a run of cfg: when, where, the load before it.
func newProxyResults(cfg proxyConfig) *proxyResults {
	return &proxyResults{Date: time.Now().UTC().Format(time.RFC3339), Machine: thisMachine(), Config: cfg,
		LoadAvgBefore: loadavg(),
		Pinning: fmt.Sprintf("proxy under test on CPU %d (taskset -c %d, which execs it; Go's GOMAXPROCS, HAProxy's threads and the JVM's processor count follow the mask: 1); "+
			"load generator and speaker on CPU %d (this process: sched_setaffinity on each of its threads, GOMAXPROCS 1)", cfg.ProxyCPU, cfg.ProxyCPU, cfg.LoadCPU)}
}

// proxyBench is a proxy-bound run under way: the paths in front of the speaker and what they
// measured so far.
type proxyBench struct {
	ctx        context.Context
	cfg        proxyConfig
	res        *proxyResults
	sp         *speaker.Server
	paths      []*path
	baseFDs    map[string]int // each proxy's open descriptors before any load
	warm, meas time.Duration
}

// measureProxyPaths starts every path in front of sp, measures through each, then stops them.
func measureProxyPaths(ctx context.Context, res *proxyResults, sp *speaker.Server, dir, bin string) error {
	b := &proxyBench{ctx: ctx, cfg: res.Config, res: res, sp: sp, baseFDs: map[string]int{},
		warm: secs(res.Config.WarmupSec), meas: secs(res.Config.MeasureSec)}
	var err error
	b.paths, err = startProxyPaths(ctx, dir, bin, sp.Addr(), b.cfg)
	defer b.stopPaths()
	if err != nil {
		return err
	}
	for _, p := range b.paths {
		res.Paths = append(res.Paths, p.Name)
		if p.pid != 0 {
			b.baseFDs[p.Name] = openFiles(p.pid)
		}
	}
	for _, step := range []func() error{b.warmUp, b.mainRounds, b.goalRounds, b.latencyRuns, b.echoFloors} {
		if err := step(); err != nil {
			return err
		}
	}
	b.checkPaths()
	return nil
}

func (b *proxyBench) stopPaths() {
	for _, p := range b.paths {
		p.stop()
	}
	b.paths = nil
}

// settle waits until a closed fleet is gone from the proxy (its descriptors back near where
// they started, or no longer falling) and from the speaker.
func (b *proxyBench) settle(p *path) {
	last, since := -1, time.Now()
	if wait.Within(30*time.Second, func() bool {
		fds := 0
		if p.pid != 0 {
			fds = openFiles(p.pid)
		}
		if fds != last {
			last, since = fds, time.Now()
		}
		return b.sp.Conns() <= 16 && (p.pid == 0 || fds <= b.baseFDs[p.Name]+64 || time.Since(since) > time.Second)
	}) {
		return
	}
	log("%s: %d descriptors (%d at start), the speaker %d connections 30 s after a fleet closed", p.Name, last, b.baseFDs[p.Name], b.sp.Conns())
}

// warmUp is a first pass over every path, not recorded: the JVM compiles its hot paths, every
// process touches its buffers.
func (b *proxyBench) warmUp() error {
	for _, p := range b.paths {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		f, err := dialFleet(p.ep, roleProducer, min(100, b.cfg.MaxConns))
		if err == nil {
			_, err = f.drive(loadRun{w: plain1KiB, warmup: 2 * b.warm, measure: b.meas})
		}
		f.close()
		b.settle(p)
		if err != nil {
			log("warm-up through %s: %v", p.Name, err)
			b.res.Checks = append(b.res.Checks, fmt.Sprintf("warm-up through %s: %v", p.Name, err))
		}
	}
	return nil
}

// mainRounds runs a fleet through every path for every role, connection count and round, the
// paths' order rotated every round.
func (b *proxyBench) mainRounds() error {
	for _, role := range b.cfg.Roles {
		for _, n := range b.cfg.Conns {
			for round := range b.cfg.Rounds {
				for i := range b.paths {
					if b.ctx.Err() != nil {
						return b.ctx.Err()
					}
					p := b.paths[(i+round)%len(b.paths)]
					b.runFleet(p, role, n, round, b.cfg.Workloads)
					b.settle(p)
				}
			}
		}
	}
	return nil
}

// goalRounds runs more rounds for the goal's cells, the two paths alternating; none unless
// both paths and the headline connection count are in the run.
func (b *proxyBench) goalRounds() error {
	var goalPaths []*path
	for _, p := range b.paths {
		if p.Name == pathPulsarProxy || p.Name == pathPulsarProxyFramed {
			goalPaths = append(goalPaths, p)
		}
	}
	if len(goalPaths) != 2 || !slices.Contains(b.cfg.Conns, b.cfg.HeadlineConns) {
		return nil
	}
	for _, role := range b.cfg.Roles {
		for round := b.cfg.Rounds; round < b.cfg.GoalRounds; round++ {
			for i := range goalPaths {
				if b.ctx.Err() != nil {
					return b.ctx.Err()
				}
				p := goalPaths[(i+round)%2]
				b.runFleet(p, role, b.cfg.HeadlineConns, round, goalWorkloads)
				b.settle(p)
			}
		}
	}
	return nil
}

// latencyRuns measures latency on one producer connection, paced, at fractions of the direct
// path's rate for the workload (measured in the main rounds, one connection).
func (b *proxyBench) latencyRuns() error {
	directMax := proxyMedian(b.res.Runs, pathDirect, roleProducer, 1, b.cfg.LatencyWorkload, func(r proxyRun) float64 { return r.MsgsPerSec })
	for _, frac := range b.cfg.LatencyFractions {
		if err := b.latencyAt(frac, frac*directMax); err != nil {
			return err
		}
	}
	return nil
}

// latencyAt runs every path at rate (frac of the direct path's) for every round and records
// each path's figures over its rounds.
func (b *proxyBench) latencyAt(frac, rate float64) error {
	got := map[string]*latencyAcc{}
	for round := range b.cfg.Rounds {
		for i := range b.paths {
			if b.ctx.Err() != nil {
				return b.ctx.Err()
			}
			p := b.paths[(i+round)%len(b.paths)]
			r, err := b.pacedRun(p, rate)
			if err != nil {
				log("latency    %-20s %.0f%% round %d: %v", p.Name, 100*frac, round, err)
				b.res.LatencyErrors = append(b.res.LatencyErrors, fmt.Sprintf("%s at %.0f%% round %d: %v", p.Name, 100*frac, round, err))
				continue
			}
			if got[p.Name] == nil {
				got[p.Name] = &latencyAcc{}
			}
			got[p.Name].add(r)
			log("latency    %-20s %.0f%% round %d: %d samples at %.0f msg/s, load CPU %.0f%%", p.Name, 100*frac, round,
				len(r.fr.Latencies), float64(r.fr.Messages)/r.fr.Seconds, 100*r.gen/r.fr.Seconds)
		}
	}
	for _, p := range b.paths {
		b.res.Latency = append(b.res.Latency, got[p.Name].latency(p.Name, frac, rate))
	}
	return nil
}

// pacedRun is what one paced latency run through a path measured.
type pacedRun struct {
	fr   fleetResult
	gen  float64 // this process's CPU seconds over the measured interval
	busy float64 // how busy the proxy's CPU was over it, percent
	gc   float64 // the proxy's garbage collections over the run, warm-up included
	gcOK bool    // both scrapes of the collections answered
}

// pacedRun drives one producer connection through p at rate. The Go proxies' garbage
// collections over the run, warm-up included (whether GC can be what the tail is made of), are
// scraped outside it: a scrape inside would delay the paced sender and the proxy alike.
func (b *proxyBench) pacedRun(p *path, rate float64) (pacedRun, error) {
	var r pacedRun
	var g0, g1 float64
	var t0, t1 map[int]cpuTimes
	lw := b.cfg.LatencyWorkload
	f, err := dialFleet(p.ep, roleProducer, 1)
	gc0, gcErr := gcCycles(p)
	if err == nil && rate > 0 {
		r.fr, err = f.drive(loadRun{w: lw, rate: rate, tick: time.Duration(b.cfg.LatencyTickMicros) * time.Microsecond,
			latency: true, warmup: b.warm, measure: b.meas * 3 / 2, onMeasure: func(start bool) {
				g, _ := cpuSeconds(os.Getpid())
				if start {
					g0, t0 = g, readCPUTimes()
				} else {
					g1, t1 = g, readCPUTimes()
				}
			}})
	} else if err == nil {
		err = fmt.Errorf("no direct rate for %s to take a fraction of", lw.label())
	}
	gc1, gcErr1 := gcCycles(p)
	f.close()
	b.settle(p)
	if err != nil {
		return r, err
	}
	r.gen, r.busy = g1-g0, busyPercent(t0, t1, b.cfg.ProxyCPU)
	r.gc, r.gcOK = gc1-gc0, gcErr == nil && gcErr1 == nil
	return r, nil
}

// gcCycles is the garbage collections a Go proxy has made so far.
func gcCycles(p *path) (float64, error) {
	if p.metrics == "" {
		return 0, errors.New("no metrics")
	}
	return scrapeSum(p.metrics, "go_gc_duration_seconds_count")
}

// latencyAcc adds up one path's latency runs at one rate.
type latencyAcc struct {
	d                          []time.Duration
	msgs, secs, gen, busyP, gc float64
	rounds, gcRounds           int
}

func (a *latencyAcc) add(r pacedRun) {
	a.d = append(a.d, r.fr.Latencies...)
	a.msgs += float64(r.fr.Messages)
	a.secs += r.fr.Seconds
	a.gen += r.gen
	a.busyP += r.busy
	a.rounds++
	if r.gcOK {
		a.gc += r.gc
		a.gcRounds++
	}
}

// latency is path's figures over the runs added, at frac of the direct path's rate; only the
// rate when a is nil (no run succeeded). It sorts a's samples.
func (a *latencyAcc) latency(path string, frac, rate float64) proxyLatency {
	l := proxyLatency{Path: path, Fraction: frac, Rate: rate}
	if a == nil {
		return l
	}
	sort.Slice(a.d, func(i, j int) bool { return a.d[i] < a.d[j] })
	l.Samples, l.P50, l.P99, l.P999 = len(a.d), micros(a.d, 0.50), micros(a.d, 0.99), micros(a.d, 0.999)
	l.RateAchieved, l.GenCPUPercent, l.ProxyCPUBusy = a.msgs/a.secs, 100*a.gen/a.secs, a.busyP/float64(a.rounds)
	if a.gcRounds == a.rounds {
		l.GCCycles = ptr(a.gc)
	}
	return l
}

// echoFloors measures the machine's floor under the added latency: an echo between the two
// CPUs, and on one.
func (b *proxyBench) echoFloors() error {
	for _, serverCPU := range []int{b.cfg.ProxyCPU, b.cfg.LoadCPU} {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		ef, err := measureEchoFloor(serverCPU, serverCPU != b.cfg.LoadCPU, b.cfg.LatencyWorkload.Size, time.Duration(b.cfg.LatencyTickMicros)*time.Microsecond, 3*b.meas)
		if err != nil {
			b.res.Checks = append(b.res.Checks, fmt.Sprintf("echo with the server on CPU %d: %v", serverCPU, err))
			continue
		}
		log("echo floor server on CPU %d, client on CPU %d: p50 %.0f p99 %.0f p99.9 %.0f µs (%d samples)", serverCPU, b.cfg.LoadCPU, ef.P50, ef.P99, ef.P999, ef.Samples)
		b.res.EchoFloor = append(b.res.EchoFloor, ef)
	}
	return nil
}

// checkPaths records what the pulsar-proxy paths did (the framed one must have read frames,
// passthrough none) and every proxy's peak RSS.
func (b *proxyBench) checkPaths() {
	for _, p := range b.paths {
		if p.metrics != "" {
			checks, scraped := b.frameChecks(p)
			b.res.Checks = append(b.res.Checks, checks...)
			if !scraped {
				continue // no /metrics: the peak RSS is left out too
			}
		}
		if p.pid != 0 {
			if hwm, err := memKiB(p.pid, "VmHWM"); err == nil {
				b.res.PeakRSSMiB = append(b.res.PeakRSSMiB, pathValue{Path: p.Name, Value: float64(hwm) / 1024})
			}
		}
	}
}

// frameChecks are the lines of checks on pulsar-proxy path p's /metrics: the frames it read,
// and for the multiplexed path the shared broker connections it opened; scraped is false when
// the first scrape failed.
func (b *proxyBench) frameChecks(p *path) (checks []string, scraped bool) {
	v, err := scrapeSum(p.metrics, "pulsar_proxy_frames_total")
	if err != nil {
		return []string{fmt.Sprintf("%s: /metrics: %v", p.Name, err)}, false
	}
	checks = []string{fmt.Sprintf("%s: pulsar_proxy_frames_total %.0f (frames read one by one; passthrough reads none)", p.Name, v)}
	if p.Name != pathPulsarProxyMultiplex {
		return checks, true
	}
	// That its clients shared broker connections: a few opened for every fleet.
	if d, err := scrapeSum(p.metrics, "pulsar_proxy_multiplex_dials_total"); err != nil {
		checks = append(checks, fmt.Sprintf("%s: /metrics: %v", p.Name, err))
	} else {
		checks = append(checks, fmt.Sprintf("%s: pulsar_proxy_multiplex_dials_total %.0f (shared broker connections opened over the run, for fleets of up to %d clients)",
			p.Name, d, slices.Max(b.cfg.Conns)))
	}
	return checks, true
}

// measureIdleMemory measures idle memory per connection on a fresh pulsar-proxy
// (bench/idlemem), on the proxy's CPU, once the other paths have stopped.
func measureIdleMemory(res *proxyResults, idlemem, bin string) {
	counts := make([]string, len(res.Config.IdleConns))
	for i, n := range res.Config.IdleConns {
		counts[i] = strconv.Itoa(n)
	}
	log("idle memory: idlemem -n %s", strings.Join(counts, ","))
	cmd := pinned(exec.Command(idlemem, "-binary", bin, "-n", strings.Join(counts, ",")), res.Config.ProxyCPU)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	res.IdleOutput = string(out)
	if err != nil {
		res.Checks = append(res.Checks, fmt.Sprintf("idlemem: %v", err))
	}
	res.Idle = parseIdlemem(string(out))
}

func resolveConns(counts []int, maxConns int) []int {
	out := make([]int, 0, len(counts))
	for _, n := range counts {
		if n == maxConnsPlaceholder || n > maxConns {
			n = maxConns
		}
		out = append(out, n)
	}
	return out
}

// runFleet opens a fleet of n role connections through p and drives every workload over it.
func (b *proxyBench) runFleet(p *path, role string, n, round int, workloads []workload) {
	t0 := time.Now()
	f, err := dialFleet(p.ep, role, n)
	setup := fleetSetup{Path: p.Name, Role: role, Conns: n, Round: round, Opened: len(f.conns), Seconds: time.Since(t0).Seconds()}
	defer f.close()
	if err != nil {
		setup.Error = err.Error()
		b.res.Setups = append(b.res.Setups, setup)
		log("fleet      %-20s %s x%d round %d: %d opened: %v", p.Name, role, n, round, len(f.conns), err)
		for _, w := range workloads {
			b.res.Runs = append(b.res.Runs, proxyRun{Path: p.Name, Role: role, Conns: n, Workload: w, Round: round, Error: "setup: " + err.Error()})
		}
		return
	}
	b.res.Setups = append(b.res.Setups, setup)
	for _, w := range workloads {
		r, err := b.measureWorkload(f, p, proxyRun{Path: p.Name, Role: role, Conns: n, Workload: w, Round: round})
		b.res.Runs = append(b.res.Runs, r)
		logFleetRun(r)
		if err != nil && f.failure() != nil {
			// The fleet is broken: the remaining workloads of this fleet fail alike.
			for _, rest := range workloads[indexOf(workloads, w)+1:] {
				b.res.Runs = append(b.res.Runs, proxyRun{Path: p.Name, Role: role, Conns: n, Workload: rest, Round: round, Error: "fleet broken: " + f.failure().Error()})
			}
			return
		}
	}
}

// cpuSample is the CPU time taken so far by the proxy (0 for the direct path) and by this
// process, and every CPU's times.
type cpuSample struct {
	proxy, gen float64
	cpus       map[int]cpuTimes
}

func sampleCPU(proxyPID int) cpuSample {
	g, _ := cpuSeconds(os.Getpid())
	var c float64
	if proxyPID != 0 {
		c, _ = cpuSeconds(proxyPID)
	}
	return cpuSample{proxy: c, gen: g, cpus: readCPUTimes()}
}

// measureWorkload drives r's workload over fleet f through p and returns r with what the
// measured interval gave (and its error, if any).
func (b *proxyBench) measureWorkload(f *fleet, p *path, r proxyRun) (proxyRun, error) {
	var s0, s1 cpuSample
	profiled := make(chan error, 1)
	profiled <- nil
	profile := b.profiles(r)
	fr, err := f.drive(loadRun{w: r.Workload, warmup: b.warm, measure: b.meas, onMeasure: func(start bool) {
		if start && profile {
			b.startProfile(profiled, p, r)
		}
		if start {
			s0 = sampleCPU(p.pid)
		} else {
			s1 = sampleCPU(p.pid)
		}
	}})
	if perr := <-profiled; perr != nil {
		log("profile of %s: %v", p.Name, perr)
	}
	if err == nil && fr.Messages == 0 {
		err = fmt.Errorf("no message answered in the %.1f s measured (a stall)", fr.Seconds)
	}
	r = b.fillRun(r, fr, s0, s1, p.pid != 0)
	if err != nil {
		r.Error = err.Error()
	}
	return r, err
}

// profiles: run r is one the CPU profiles cover (pulsar-proxy, passthrough and framed, round 0
// of the goal's cells; the multiplexed path's round 0 of every cell), when they were asked for.
func (b *proxyBench) profiles(r proxyRun) bool {
	if !b.cfg.Profile || r.Round != 0 {
		return false
	}
	if r.Path == pathPulsarProxyMultiplex {
		return true
	}
	return (r.Path == pathPulsarProxy || r.Path == pathPulsarProxyFramed) &&
		r.Conns == b.cfg.HeadlineConns && slices.Contains(goalWorkloads, r.Workload)
}

// startProfile takes a CPU profile of p over the measured interval of run r, in the
// background; done (holding the last profile's error) gets this one's when it is written.
func (b *proxyBench) startProfile(done chan error, p *path, r proxyRun) {
	<-done
	base := filepath.Join(b.cfg.profileDir, fmt.Sprintf("proxy-bound-%s-%s-%d-%s", p.Name, r.Role, r.Conns, r.Workload.flagName()))
	secs := max(1, int(b.meas.Seconds()))
	go func() {
		allocs := make(chan error, 1)
		go func() { // the allocations of the same interval (a delta profile)
			allocs <- saveProfile(p.pprof, fmt.Sprintf("allocs?seconds=%d", secs), base+".allocs.pprof")
		}()
		err := saveProfile(p.pprof, fmt.Sprintf("profile?seconds=%d", secs), base+".cpu.pprof")
		done <- errors.Join(err, <-allocs)
	}()
}

// fillRun sets r's figures from the fleet's result and the CPU samples at the start and the
// end of the measured interval; the proxy's CPU only if there is a proxy process.
func (b *proxyBench) fillRun(r proxyRun, fr fleetResult, s0, s1 cpuSample, proxy bool) proxyRun {
	r.ProxyCPUBusy, r.LoadCPUBusy = busyPercent(s0.cpus, s1.cpus, b.cfg.ProxyCPU), busyPercent(s0.cpus, s1.cpus, b.cfg.LoadCPU)
	r.StealPercent = stealPercent(s0.cpus, s1.cpus, b.cfg.ProxyCPU) + stealPercent(s0.cpus, s1.cpus, b.cfg.LoadCPU)
	r.Messages, r.Seconds = fr.Messages, fr.Seconds
	if fr.Seconds > 0 {
		r.MsgsPerSec = float64(fr.Messages) / fr.Seconds
		r.MBPerSec = float64(fr.Messages) * float64(r.Workload.Size) / fr.Seconds / 1e6
		r.GenCPUSeconds = s1.gen - s0.gen
		if proxy {
			r.ProxyCPUSeconds = ptr(s1.proxy - s0.proxy)
		}
	}
	return r
}

// logFleetRun logs one measured run of a fleet.
func logFleetRun(r proxyRun) {
	cpu := "—"
	if r.ProxyCPUSeconds != nil {
		cpu = fmt.Sprintf("%.0f%%", 100**r.ProxyCPUSeconds/r.Seconds)
	}
	log("%-8s x%-5d %-20s %-11s round %d: %10.0f msg/s %8.1f MB/s proxy CPU %4s (busy %3.0f%%) load CPU %3.0f%% (busy %3.0f%%) %s",
		r.Role, r.Conns, r.Path, r.Workload.label(), r.Round, r.MsgsPerSec, r.MBPerSec, cpu, r.ProxyCPUBusy, 100*r.GenCPUSeconds/max(r.Seconds, 1e-9), r.LoadCPUBusy, r.Error)
}

func indexOf(ws []workload, w workload) int {
	for i, x := range ws {
		if x == w {
			return i
		}
	}
	return len(ws)
}

// startProxyPaths starts every path in front of the speaker at far: direct, pulsar-proxy
// (passthrough), pulsar-proxy framed (authentication and authorization on), the Java proxy
// (zero-copy), HAProxy without and with splice.
func startProxyPaths(ctx context.Context, dir, bin, far string, cfg proxyConfig) ([]*path, error) {
	var paths []*path
	for _, s := range proxyPathStarters(ctx, dir, bin, far, cfg) {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, s.name) {
			continue
		}
		p, err := s.start()
		if err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// pathStarter starts the path called name.
type pathStarter struct {
	name  string
	start func() (*path, error)
}

// proxyPathStarters are the starters of every path in front of far, in the order the paths
// run.
func proxyPathStarters(ctx context.Context, dir, bin, far string, cfg proxyConfig) []pathStarter {
	quiet := "log:\n  level: info\n  sessionSummary: \"off\"\n"
	maxConn := cfg.MaxConns + 100
	// Splicing's pipes share the descriptor limit with the connections (two each).
	maxPipes := max(64, (cfg.DescriptorLimit-2*maxConn-200)/2)
	haproxy := func(name string, splice bool) func() (*path, error) {
		return func() (*path, error) {
			log("starting %s", name)
			return haproxyPath(dir, far, name, haproxyOptions{splice: splice, maxConn: maxConn, maxPipes: maxPipes, cpu: cfg.ProxyCPU})
		}
	}
	return []pathStarter{
		{pathDirect, func() (*path, error) { return &path{Name: pathDirect, ep: endpoint{addr: far}, stop: func() {}}, nil }},
		{pathPulsarProxy, func() (*path, error) { return startPassthroughProxy(dir, bin, far, quiet, cfg.ProxyCPU) }},
		{pathPulsarProxyFramed, func() (*path, error) {
			return startFramedProxy(dir, bin, far, pathPulsarProxyFramed, quiet, cfg.ProxyCPU)
		}},
		// The framed path's configuration plus multiplexing: the one difference between the two
		// is whether the clients share broker connections.
		{pathPulsarProxyMultiplex, func() (*path, error) {
			return startFramedProxy(dir, bin, far, pathPulsarProxyMultiplex,
				"broker:\n  multiplex: true\nsession:\n  passthrough: false\n"+quiet, cfg.ProxyCPU)
		}},
		{pathJavaProxy, func() (*path, error) { return startJavaProxy(ctx, dir, far, cfg.ProxyCPU) }},
		{pathHAProxy, haproxy(pathHAProxy, false)},
		{pathHAProxySplice, haproxy(pathHAProxySplice, true)},
	}
}

// startPassthroughProxy runs pulsar-proxy in passthrough (splice) in front of far; quiet ends
// its config.
func startPassthroughProxy(dir, bin, far, quiet string, cpu int) (*path, error) {
	pdir := filepath.Join(dir, pathPulsarProxy)
	os.MkdirAll(pdir, 0o755)
	log("starting %s", pathPulsarProxy)
	return startPulsarProxy(bin, pdir, "pulsar://"+far, far, pathPulsarProxy, "session:\n  passthrough: true\n"+quiet, cpu)
}

// startJavaProxy runs the Java proxy in front of far, with a broker HTTP address that nothing
// answers (the speaker has none).
func startJavaProxy(ctx context.Context, dir, far string, cpu int) (*path, error) {
	log("starting %s", pathJavaProxy)
	jdir := filepath.Join(dir, pathJavaProxy)
	os.MkdirAll(jdir, 0o755)
	return javaProxyPath(ctx, jdir, javaTarget{cluster: "bench", brokerURL: "pulsar://" + far, brokerHTTP: "http://127.0.0.1:1"}, cpu)
}

// startFramedProxy runs pulsar-proxy as path name with authentication and authorization on, so
// that it reads every frame: a client token checked at CONNECT (the path's endpoint carries one
// for role bench), a policy checked at PRODUCER and SUBSCRIBE; extraYAML ends its config.
func startFramedProxy(dir, bin, far, name, extraYAML string, cpu int) (*path, error) {
	fdir := filepath.Join(dir, name)
	os.MkdirAll(fdir, 0o755)
	secret := make([]byte, 32)
	rand.Read(secret)
	secretFile, policyFile := filepath.Join(fdir, "secret.key"), filepath.Join(fdir, "policy.yaml")
	// The key file's bytes are the key as they are (as brokers read tokenSecretKey files).
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		return nil, err
	}
	policy := "rules:\n  - roles: [bench]\n    resources: [\"" + benchNamespace + "/*\"]\n    actions: [lookup, produce, consume]\n"
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	framedYAML := fmt.Sprintf("auth:\n  enabled: true\n  token:\n    secretKeyFile: %s\n  brokerClient:\n    token: %s\n"+
		"authz:\n  enabled: true\n  policyFile: %s\n", secretFile, hs256Token(secret, "pulsar-proxy"), policyFile) + extraYAML
	log("starting %s", name)
	fp, err := startPulsarProxy(bin, fdir, "pulsar://"+far, far, name, framedYAML, cpu)
	if err != nil {
		return nil, err
	}
	fp.ep.token = hs256Token(secret, "bench")
	return fp, nil
}

// hs256Token is a JWT {"sub": role} signed with key (HS256), as Pulsar's token tool makes.
func hs256Token(key []byte, role string) string {
	enc := base64.RawURLEncoding
	msg := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(`{"sub":"`+role+`"}`))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(m.Sum(nil))
}

// micros is the q-quantile of sorted durations in microseconds.
func micros(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(q*float64(len(sorted)-1))]) / float64(time.Microsecond)
}

// scrapeSum adds up every series of metric name in a Prometheus text scrape.
func scrapeSum(url, name string) (float64, error) { return scrapeSumWith(url, name, "") }

// scrapeSumWith adds up the series of metric name whose line holds label (area="heap"; ""
// for every series).
func scrapeSumWith(url, name, label string) (float64, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	var found bool
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") || !strings.Contains(line, label) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q", name, line)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("%s{%s} not in the scrape", name, label)
	}
	return sum, s.Err()
}

// parseIdlemem reads idlemem's Markdown table by its column names.
func parseIdlemem(out string) []idleRow {
	var cols []string
	var rows []idleRow
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cols == nil {
			cols = cells
			continue
		}
		row := idleRow{}
		for i, c := range cells {
			if i >= len(cols) {
				break
			}
			v, err := strconv.ParseFloat(c, 64)
			switch name := cols[i]; {
			case name == "mode":
				row.Mode = c
			case name == "connections":
				n, _ := strconv.Atoi(c)
				row.Conns = n
			case strings.HasPrefix(c, "(skipped"):
				row.Skipped = strings.Trim(c, "()")
			case err != nil:
			case strings.HasPrefix(name, "RSS growth"):
				row.RSSKiB = ptr(v)
			case strings.HasPrefix(name, "live heap"):
				row.HeapKiB = ptr(v)
			case strings.HasPrefix(name, "stacks"):
				row.StackKiB = ptr(v)
			case strings.HasPrefix(name, "goroutines"):
				row.Goroutines = ptr(v)
			}
		}
		if row.Mode != "" {
			rows = append(rows, row)
		}
	}
	return rows
}

// pinnedSpeaker pins this process (the load generator and the speaker) to cpu and starts the
// speaker, the far end of the proxy-bound paths.
func pinnedSpeaker(cpu int) (*speaker.Server, error) {
	if err := pinSelf(cpu); err != nil {
		return nil, err
	}
	return speaker.Listen("127.0.0.1:0")
}
