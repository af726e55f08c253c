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
	if err := checkPinning(cfg.ProxyCPU, cfg.LoadCPU); err != nil {
		return err
	}
	if cfg.Profile {
		cfg.profileDir = filepath.Join(outDir, "profiles")
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return err
		}
	}
	cfg.DescriptorLimit = descriptorLimit()
	cfg.MaxConns = min(wantConns, (cfg.DescriptorLimit-descriptorReserve)/2)
	cfg.Conns = resolveConns(cfg.Conns, cfg.MaxConns)
	cfg.IdleConns = resolveConns(cfg.IdleConns, cfg.MaxConns)

	dir, err := os.MkdirTemp("", "pulsar-proxy-bench-proxy-")
	if err != nil {
		return err
	}
	if keep {
		log("work directory (configs and logs of the proxies) kept: %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// Built before this process is pinned to its one CPU.
	log("building pulsar-proxy and bench/idlemem")
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	bin, err := proxyproc.Build(binDir)
	if err != nil {
		return err
	}
	idlemem := filepath.Join(binDir, "idlemem")
	build := exec.Command("go", "build", "-o", idlemem, "./idlemem")
	build.Dir = filepath.Join(proxyproc.RepoRoot(), "bench")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build idlemem: %v\n%s", err, out)
	}

	res := &proxyResults{Date: time.Now().UTC().Format(time.RFC3339), Machine: thisMachine(), Config: cfg,
		LoadAvgBefore: loadavg(),
		Pinning: fmt.Sprintf("proxy under test on CPU %d (taskset -c %d, which execs it; Go's GOMAXPROCS, HAProxy's threads and the JVM's processor count follow the mask: 1); "+
			"load generator and speaker on CPU %d (this process: sched_setaffinity on each of its threads, GOMAXPROCS 1)", cfg.ProxyCPU, cfg.ProxyCPU, cfg.LoadCPU)}
	if err := pinSelf(cfg.LoadCPU); err != nil {
		return err
	}
	sp, err := speaker.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer sp.Close()
	log("speaker on %s; connections %v (descriptor limit %d)", sp.Addr(), cfg.Conns, cfg.DescriptorLimit)

	paths, err := startProxyPaths(ctx, dir, bin, sp.Addr(), cfg)
	stopAll := func() {
		for _, p := range paths {
			p.stop()
		}
		paths = nil
	}
	defer func() { stopAll() }()
	if err != nil {
		return err
	}
	for _, p := range paths {
		res.Paths = append(res.Paths, p.Name)
	}
	baseFDs := map[string]int{}
	for _, p := range paths {
		if p.pid != 0 {
			baseFDs[p.Name] = openFiles(p.pid)
		}
	}
	// settle waits until a closed fleet is gone from the proxy (its descriptors back near where
	// they started, or no longer falling) and from the speaker.
	settle := func(p *path) {
		last, since := -1, time.Now()
		if wait.Within(30*time.Second, func() bool {
			fds := 0
			if p.pid != 0 {
				fds = openFiles(p.pid)
			}
			if fds != last {
				last, since = fds, time.Now()
			}
			return sp.Conns() <= 16 && (p.pid == 0 || fds <= baseFDs[p.Name]+64 || time.Since(since) > time.Second)
		}) {
			return
		}
		log("%s: %d descriptors (%d at start), the speaker %d connections 30 s after a fleet closed", p.Name, last, baseFDs[p.Name], sp.Conns())
	}
	warm, meas := secs(cfg.WarmupSec), secs(cfg.MeasureSec)

	// A first pass over every path, not recorded: the JVM compiles its hot paths, every
	// process touches its buffers.
	for _, p := range paths {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f, err := dialFleet(p.ep, roleProducer, min(100, cfg.MaxConns))
		if err == nil {
			_, err = f.drive(loadRun{w: plain1KiB, warmup: 2 * warm, measure: meas})
		}
		f.close()
		settle(p)
		if err != nil {
			log("warm-up through %s: %v", p.Name, err)
			res.Checks = append(res.Checks, fmt.Sprintf("warm-up through %s: %v", p.Name, err))
		}
	}

	for _, role := range cfg.Roles {
		for _, n := range cfg.Conns {
			for round := range cfg.Rounds {
				for i := range paths {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					p := paths[(i+round)%len(paths)]
					runFleet(res, p, role, n, round, cfg.Workloads, cfg, warm, meas)
					settle(p)
				}
			}
		}
	}

	// More rounds for the goal's cells, the two paths alternating.
	var goalPaths []*path
	for _, p := range paths {
		if p.Name == pathPulsarProxy || p.Name == pathPulsarProxyFramed {
			goalPaths = append(goalPaths, p)
		}
	}
	if len(goalPaths) == 2 && slices.Contains(cfg.Conns, cfg.HeadlineConns) {
		for _, role := range cfg.Roles {
			for round := cfg.Rounds; round < cfg.GoalRounds; round++ {
				for i := range goalPaths {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					p := goalPaths[(i+round)%2]
					runFleet(res, p, role, cfg.HeadlineConns, round, goalWorkloads, cfg, warm, meas)
					settle(p)
				}
			}
		}
	}

	// Latency: one producer connection, paced, at fractions of the direct path's rate for
	// the workload (measured above, one connection).
	lw := cfg.LatencyWorkload
	directMax := proxyMedian(res.Runs, pathDirect, roleProducer, 1, lw, func(r proxyRun) float64 { return r.MsgsPerSec })
	for _, frac := range cfg.LatencyFractions {
		rate := frac * directMax
		type acc struct {
			d                          []time.Duration
			msgs, secs, gen, busyP, gc float64
			rounds, gcRounds           int
		}
		got := map[string]*acc{}
		for round := range cfg.Rounds {
			for i := range paths {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				p := paths[(i+round)%len(paths)]
				f, err := dialFleet(p.ep, roleProducer, 1)
				var fr fleetResult
				var g0, g1 float64
				var t0, t1 map[int]cpuTimes
				// The Go proxies' garbage collections over the run, warm-up included (whether
				// GC can be what the tail is made of), scraped outside it: a scrape inside
				// would delay the paced sender and the proxy alike.
				gcs := func() (float64, error) {
					if p.metrics == "" {
						return 0, errors.New("no metrics")
					}
					return scrapeSum(p.metrics, "go_gc_duration_seconds_count")
				}
				gc0, gcErr := gcs()
				if err == nil && rate > 0 {
					fr, err = f.drive(loadRun{w: lw, rate: rate, tick: time.Duration(cfg.LatencyTickMicros) * time.Microsecond,
						latency: true, warmup: warm, measure: meas * 3 / 2, onMeasure: func(start bool) {
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
				gc1, gcErr1 := gcs()
				f.close()
				settle(p)
				if err != nil {
					log("latency    %-20s %.0f%% round %d: %v", p.Name, 100*frac, round, err)
					res.LatencyErrors = append(res.LatencyErrors, fmt.Sprintf("%s at %.0f%% round %d: %v", p.Name, 100*frac, round, err))
					continue
				}
				a := got[p.Name]
				if a == nil {
					a = &acc{}
					got[p.Name] = a
				}
				a.d = append(a.d, fr.Latencies...)
				a.msgs += float64(fr.Messages)
				a.secs += fr.Seconds
				a.gen += g1 - g0
				a.busyP += busyPercent(t0, t1, cfg.ProxyCPU)
				a.rounds++
				if gcErr == nil && gcErr1 == nil {
					a.gc += gc1 - gc0
					a.gcRounds++
				}
				log("latency    %-20s %.0f%% round %d: %d samples at %.0f msg/s, load CPU %.0f%%", p.Name, 100*frac, round,
					len(fr.Latencies), float64(fr.Messages)/fr.Seconds, 100*(g1-g0)/fr.Seconds)
			}
		}
		for _, p := range paths {
			l := proxyLatency{Path: p.Name, Fraction: frac, Rate: rate}
			if a := got[p.Name]; a != nil {
				sort.Slice(a.d, func(i, j int) bool { return a.d[i] < a.d[j] })
				l.Samples, l.P50, l.P99, l.P999 = len(a.d), micros(a.d, 0.50), micros(a.d, 0.99), micros(a.d, 0.999)
				l.RateAchieved, l.GenCPUPercent, l.ProxyCPUBusy = a.msgs/a.secs, 100*a.gen/a.secs, a.busyP/float64(a.rounds)
				if a.gcRounds == a.rounds {
					l.GCCycles = ptr(a.gc)
				}
			}
			res.Latency = append(res.Latency, l)
		}
	}

	// The machine's floor under the added latency: an echo between the two CPUs, and on one.
	for _, serverCPU := range []int{cfg.ProxyCPU, cfg.LoadCPU} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ef, err := measureEchoFloor(serverCPU, serverCPU != cfg.LoadCPU, cfg.LatencyWorkload.Size, time.Duration(cfg.LatencyTickMicros)*time.Microsecond, 3*meas)
		if err != nil {
			res.Checks = append(res.Checks, fmt.Sprintf("echo with the server on CPU %d: %v", serverCPU, err))
			continue
		}
		log("echo floor server on CPU %d, client on CPU %d: p50 %.0f p99 %.0f p99.9 %.0f µs (%d samples)", serverCPU, cfg.LoadCPU, ef.P50, ef.P99, ef.P999, ef.Samples)
		res.EchoFloor = append(res.EchoFloor, ef)
	}

	// What the pulsar-proxy paths did: the framed one must have read frames, passthrough none.
	for _, p := range paths {
		if p.metrics != "" {
			v, err := scrapeSum(p.metrics, "pulsar_proxy_frames_total")
			if err != nil {
				res.Checks = append(res.Checks, fmt.Sprintf("%s: /metrics: %v", p.Name, err))
				continue
			}
			res.Checks = append(res.Checks, fmt.Sprintf("%s: pulsar_proxy_frames_total %.0f (frames read one by one; passthrough reads none)", p.Name, v))
			if p.Name == pathPulsarProxyMultiplex {
				// That its clients shared broker connections: a few opened for every fleet.
				if d, err := scrapeSum(p.metrics, "pulsar_proxy_multiplex_dials_total"); err != nil {
					res.Checks = append(res.Checks, fmt.Sprintf("%s: /metrics: %v", p.Name, err))
				} else {
					res.Checks = append(res.Checks, fmt.Sprintf("%s: pulsar_proxy_multiplex_dials_total %.0f (shared broker connections opened over the run, for fleets of up to %d clients)",
						p.Name, d, slices.Max(cfg.Conns)))
				}
			}
		}
		if p.pid != 0 {
			if hwm, err := memKiB(p.pid, "VmHWM"); err == nil {
				res.PeakRSSMiB = append(res.PeakRSSMiB, pathValue{Path: p.Name, Value: float64(hwm) / 1024})
			}
		}
	}
	stopAll()

	// Idle memory per connection on a fresh pulsar-proxy (bench/idlemem), on the proxy's CPU.
	if len(cfg.IdleConns) > 0 {
		counts := make([]string, len(cfg.IdleConns))
		for i, n := range cfg.IdleConns {
			counts[i] = strconv.Itoa(n)
		}
		log("idle memory: idlemem -n %s", strings.Join(counts, ","))
		cmd := pinned(exec.Command(idlemem, "-binary", bin, "-n", strings.Join(counts, ",")), cfg.ProxyCPU)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		res.IdleOutput = string(out)
		if err != nil {
			res.Checks = append(res.Checks, fmt.Sprintf("idlemem: %v", err))
		}
		res.Idle = parseIdlemem(string(out))
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
func runFleet(res *proxyResults, p *path, role string, n, round int, workloads []workload, cfg proxyConfig, warm, meas time.Duration) {
	t0 := time.Now()
	f, err := dialFleet(p.ep, role, n)
	setup := fleetSetup{Path: p.Name, Role: role, Conns: n, Round: round, Opened: len(f.conns), Seconds: time.Since(t0).Seconds()}
	defer f.close()
	if err != nil {
		setup.Error = err.Error()
		res.Setups = append(res.Setups, setup)
		log("fleet      %-20s %s x%d round %d: %d opened: %v", p.Name, role, n, round, len(f.conns), err)
		for _, w := range workloads {
			res.Runs = append(res.Runs, proxyRun{Path: p.Name, Role: role, Conns: n, Workload: w, Round: round, Error: "setup: " + err.Error()})
		}
		return
	}
	res.Setups = append(res.Setups, setup)
	for _, w := range workloads {
		var cpu0, cpu1, gen0, gen1 float64
		var t0, t1 map[int]cpuTimes
		r := proxyRun{Path: p.Name, Role: role, Conns: n, Workload: w, Round: round}
		profiled := make(chan error, 1)
		profiled <- nil
		profile := cfg.Profile && (p.Name == pathPulsarProxy || p.Name == pathPulsarProxyFramed) && round == 0 && n == cfg.HeadlineConns && slices.Contains(goalWorkloads, w)
		fr, err := f.drive(loadRun{w: w, warmup: warm, measure: meas, onMeasure: func(start bool) {
			if start && profile {
				<-profiled
				file := filepath.Join(cfg.profileDir, fmt.Sprintf("proxy-bound-%s-%s-%s.cpu.pprof", p.Name, role, strings.NewReplacer(" ", "", "×", "x").Replace(w.label())))
				go func() {
					profiled <- saveProfile(p.pprof, fmt.Sprintf("profile?seconds=%d", max(1, int(meas.Seconds()))), file)
				}()
			}
			g, _ := cpuSeconds(os.Getpid())
			var c float64
			if p.pid != 0 {
				c, _ = cpuSeconds(p.pid)
			}
			if start {
				cpu0, gen0, t0 = c, g, readCPUTimes()
			} else {
				cpu1, gen1, t1 = c, g, readCPUTimes()
			}
		}})
		if perr := <-profiled; perr != nil {
			log("profile of %s: %v", p.Name, perr)
		}
		r.ProxyCPUBusy, r.LoadCPUBusy = busyPercent(t0, t1, cfg.ProxyCPU), busyPercent(t0, t1, cfg.LoadCPU)
		r.StealPercent = stealPercent(t0, t1, cfg.ProxyCPU) + stealPercent(t0, t1, cfg.LoadCPU)
		if err == nil && fr.Messages == 0 {
			err = fmt.Errorf("no message answered in the %.1f s measured (a stall)", fr.Seconds)
		}
		r.Messages, r.Seconds = fr.Messages, fr.Seconds
		if fr.Seconds > 0 {
			r.MsgsPerSec = float64(fr.Messages) / fr.Seconds
			r.MBPerSec = float64(fr.Messages) * float64(w.Size) / fr.Seconds / 1e6
			r.GenCPUSeconds = gen1 - gen0
			if p.pid != 0 {
				r.ProxyCPUSeconds = ptr(cpu1 - cpu0)
			}
		}
		if err != nil {
			r.Error = err.Error()
		}
		res.Runs = append(res.Runs, r)
		cpu := "—"
		if r.ProxyCPUSeconds != nil {
			cpu = fmt.Sprintf("%.0f%%", 100**r.ProxyCPUSeconds/r.Seconds)
		}
		log("%-8s x%-5d %-20s %-11s round %d: %10.0f msg/s %8.1f MB/s proxy CPU %4s (busy %3.0f%%) load CPU %3.0f%% (busy %3.0f%%) %s",
			role, n, p.Name, w.label(), round, r.MsgsPerSec, r.MBPerSec, cpu, r.ProxyCPUBusy, 100*r.GenCPUSeconds/max(r.Seconds, 1e-9), r.LoadCPUBusy, r.Error)
		if err != nil && f.failure() != nil {
			// The fleet is broken: the remaining workloads of this fleet fail alike.
			for _, rest := range workloads[indexOf(workloads, w)+1:] {
				res.Runs = append(res.Runs, proxyRun{Path: p.Name, Role: role, Conns: n, Workload: rest, Round: round, Error: "fleet broken: " + f.failure().Error()})
			}
			return
		}
	}
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
	want := func(name string) bool { return len(cfg.Only) == 0 || slices.Contains(cfg.Only, name) }
	if want(pathDirect) {
		paths = append(paths, &path{Name: pathDirect, ep: endpoint{addr: far}, stop: func() {}})
	}
	farURL := "pulsar://" + far
	quiet := "log:\n  level: info\n  sessionSummary: \"off\"\n"

	if want(pathPulsarProxy) {
		pdir := filepath.Join(dir, pathPulsarProxy)
		os.MkdirAll(pdir, 0o755)
		log("starting %s", pathPulsarProxy)
		pp, err := startPulsarProxy(bin, pdir, farURL, far, pathPulsarProxy, "session:\n  passthrough: true\n"+quiet, cfg.ProxyCPU)
		if err != nil {
			return paths, err
		}
		paths = append(paths, pp)
	}
	if want(pathPulsarProxyFramed) {
		fp, err := startFramedProxy(dir, bin, far, pathPulsarProxyFramed, quiet, cfg.ProxyCPU)
		if err != nil {
			return paths, err
		}
		paths = append(paths, fp)
	}
	if want(pathPulsarProxyMultiplex) {
		// The framed path's configuration plus multiplexing: the one difference between the two
		// is whether the clients share broker connections.
		mp, err := startFramedProxy(dir, bin, far, pathPulsarProxyMultiplex,
			"broker:\n  multiplex: true\nsession:\n  passthrough: false\n"+quiet, cfg.ProxyCPU)
		if err != nil {
			return paths, err
		}
		paths = append(paths, mp)
	}
	if want(pathJavaProxy) {
		log("starting %s", pathJavaProxy)
		jdir := filepath.Join(dir, pathJavaProxy)
		os.MkdirAll(jdir, 0o755)
		jp, err := javaProxyPath(ctx, jdir, javaTarget{cluster: "bench", brokerURL: farURL, brokerHTTP: "http://127.0.0.1:1"}, cfg.ProxyCPU)
		if err != nil {
			return paths, err
		}
		paths = append(paths, jp)
	}

	maxConn := cfg.MaxConns + 100
	// Splicing's pipes share the descriptor limit with the connections (two each).
	maxPipes := max(64, (cfg.DescriptorLimit-2*maxConn-200)/2)
	for _, h := range []struct {
		name   string
		splice bool
	}{{pathHAProxy, false}, {pathHAProxySplice, true}} {
		if !want(h.name) {
			continue
		}
		log("starting %s", h.name)
		hp, err := haproxyPath(dir, far, h.name, haproxyOptions{splice: h.splice, maxConn: maxConn, maxPipes: maxPipes, cpu: cfg.ProxyCPU})
		if err != nil {
			return paths, err
		}
		paths = append(paths, hp)
	}
	return paths, nil
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
	if err := os.WriteFile(secretFile, []byte(base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
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
func scrapeSum(url, name string) (float64, error) {
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
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
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
		return 0, fmt.Errorf("%s not in the scrape", name)
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
