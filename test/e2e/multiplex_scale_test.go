package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// muxLoadBinary is testdata/muxload, built once for the package: one process of many clients.
var muxLoadBinary string

func init() {
	beforeAll("build muxload", func(dir string) error {
		out := filepath.Join(dir, "muxload")
		cmd := exec.Command("go", "build", "-o", out, "./testdata/muxload")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build muxload: %v\n%s", err, b)
		}
		muxLoadBinary = out
		return nil
	})
}

// EnvMuxClients sets how many clients, each with its own connection to the proxy and one
// producer, TestMultiplexManyConnections runs (default 2000; the figure is 10000).
const EnvMuxClients = "E2E_MUX_CLIENTS"

// clientsPerLoadProc bounds the clients of one muxload process: each holds two descriptors
// (its producer's connection and, for a while, its lookup connection), well below the
// machine's limit.
const clientsPerLoadProc = 2000

// lookupConnLife is how long a muxload client's lookup connection stays open, with a margin:
// the client's idle check runs every minute from the client's start and closes connections
// idle for more than a minute, so one used at the start closes at the second check, two
// minutes in. (With pulsar-client-go's default partition discovery, a lookup every minute
// per producer, it never closes: 10,000 such clients hold 20,000 connections to the proxy.)
const lookupConnLife = 180 * time.Second

// TestMultiplexManyConnections: thousands of clients (pulsar-client-go, each its own client
// and connection to the proxy, spread over muxload processes), each with a producer, on 20
// topics of the brokers through one proxy: the brokers see the proxy on at most
// multiplexConnections connections each (their topic stats, by publisher address), every
// message arrives, each producer's in order. The proxy's descriptors, RSS and the time are
// logged.
func TestMultiplexManyConnections(t *testing.T) {
	clients := 2000
	if v := os.Getenv(EnvMuxClients); v != "" {
		if _, err := fmt.Sscan(v, &clients); err != nil || clients < 1 {
			t.Fatalf("%s=%q: want a positive number", EnvMuxClients, v)
		}
	}
	const maxConns, topics, perProducer = 4, 20, 3
	proxy := startProxy(t, brokerURLs(), muxYAML(maxConns))
	names := make([]string, topics)
	for i := range names {
		names[i] = uniqueTopic(t, fmt.Sprintf("mux-scale-%02d", i)) // bundles spread them over the brokers
	}
	c := newClient(t, proxy.PulsarURL)
	consumers := make([]pulsar.Consumer, topics)
	for i, topic := range names {
		consumers[i] = subscribe(t, c, topic, "all", pulsar.Exclusive)
	}
	limit, err := openFilesLimit(proxy.PID())
	if err != nil {
		t.Fatal(err)
	}
	rate := creationRate(t, limit, clients)
	sampler := sampleProc(proxy.PID())
	defer sampler.stop()

	began := time.Now()
	procs := startLoads(t, proxy.PulsarURL, names, clients, perProducer, rate)
	for _, l := range procs {
		l.await(t, "ready", 30*time.Minute)
	}
	created := time.Since(began)
	direct := proxy.metric(t, "pulsar_proxy_sessions_active", `mode="direct"`)
	lookups := proxy.metric(t, "pulsar_proxy_sessions_active", `mode="lookup"`)
	t.Logf("%d producers created in %v by %d processes (%.0f a second at most); the proxy has %v direct and %v lookup sessions",
		clients, created.Round(time.Millisecond), len(procs), rate, direct, lookups)
	if direct < float64(clients) {
		t.Fatalf("%v direct client connections for %d producers, want one each at least", direct, clients)
	}
	perBroker := checkBrokerConns(t, names, clients, maxConns)

	sendBegan := time.Now()
	for _, l := range procs {
		l.send(t)
	}
	for _, l := range procs {
		l.await(t, "sent", 10*time.Minute)
	}
	receiveSpread(t, consumers, clients, perProducer)
	peakFDs, peakRSS := sampler.stop()
	hwm, _ := procStatus(proxy.PID(), "VmHWM")
	lookupTotal := proxy.metric(t, "pulsar_proxy_sessions_total", `mode="lookup"`)
	t.Logf("RESULT %d clients with a producer each through one proxy (broker.multiplex, multiplexConnections %d): the brokers saw %s; "+
		"%d messages arrived, each producer's in order, sent and received in %v; %v from the first client to the last message; "+
		"proxy: %d descriptors at most (limit %d), %v lookup connections in all, RSS %s at most (VmHWM %s)",
		clients, maxConns, perBroker, clients*perProducer, time.Since(sendBegan).Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond), peakFDs, limit, lookupTotal, mib(peakRSS), mib(hwm))
	if peakFDs >= limit {
		t.Errorf("the proxy reached its descriptor limit (%d): connections may have been refused and retried", limit)
	}
}

// receiveSpread receives, on each topic's consumer, the messages of its share of producers
// (producer i on topic i mod the topics), each producer's in order.
func receiveSpread(t *testing.T, consumers []pulsar.Consumer, producers, perProducer int) {
	t.Helper()
	for i, cons := range consumers {
		n := producers / len(consumers)
		if i < producers%len(consumers) {
			n++
		}
		receiveInProducerOrder(t, cons, n, perProducer)
	}
}

// checkBrokerConns checks the brokers' topic stats: every producer listed, and the proxy on at
// most maxConns connections to each broker. It returns the connection counts per broker.
func checkBrokerConns(t *testing.T, topics []string, clients, maxConns int) string {
	t.Helper()
	publishers, addrs := publisherAddrs(t, topics)
	if publishers != clients {
		t.Fatalf("the brokers list %d producers, want %d", publishers, clients)
	}
	var seen []string
	for broker, a := range addrs {
		seen = append(seen, fmt.Sprintf("%d connections from the proxy at broker %s", len(a), broker))
		if len(a) > maxConns {
			t.Fatalf("broker %s sees %d connections from the proxy, want at most %d", broker, len(a), maxConns)
		}
	}
	return strings.Join(seen, ", ")
}

// creationRate is how many clients a second the load processes may create so that the proxy,
// holding each client's producer connection and, for lookupConnLife, its lookup connection,
// stays below its descriptor limit (0: no pacing needed). A real client keeps its lookup
// connection for as long as it likes: at this machine's limit, 10,000 clients with two
// connections each do not fit in one process, so the clients' own idle timeout frees them.
func creationRate(t *testing.T, limit, clients int) float64 {
	t.Helper()
	const reserve = 1000 // listeners, broker connections, log, the test's own clients, handshakes
	if 2*clients+reserve <= limit {
		return 0
	}
	lookupBudget := limit - clients - reserve
	if lookupBudget < 100 {
		t.Fatalf("the proxy's descriptor limit %d leaves no room for %d clients' lookup connections", limit, clients)
	}
	rate := float64(lookupBudget) / lookupConnLife.Seconds()
	t.Logf("the proxy's descriptor limit is %d: clients are created at %.0f a second so their lookup connections fit", limit, rate)
	return rate
}

// openFilesLimit reads the soft limit on open files of process pid.
func openFilesLimit(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			var soft int
			_, err := fmt.Sscan(rest, &soft)
			return soft, err
		}
	}
	return 0, fmt.Errorf("no open-files limit in /proc/%d/limits", pid)
}

// loadProc is one running muxload process.
type loadProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan loadReport
}

// loadReport is one JSON line of muxload.
type loadReport struct {
	Event     string `json:"event"`
	Producers int    `json:"producers"`
	Messages  int    `json:"messages"`
	Millis    int64  `json:"ms"`
	Error     string `json:"error"`
}

// startLoads starts enough muxload processes for clients clients (producer i on topic i mod
// len(topics)), each creating its share at rate/processes a second; they exit when the test
// ends.
func startLoads(t *testing.T, url string, topics []string, clients, per int, rate float64) []*loadProc {
	t.Helper()
	n := (clients + clientsPerLoadProc - 1) / clientsPerLoadProc
	var procs []*loadProc
	for i := range n {
		first, count := i*clients/n, (i+1)*clients/n-i*clients/n
		args := []string{"-url", url, "-topics", strings.Join(topics, ","), "-first", fmt.Sprint(first),
			"-count", fmt.Sprint(count), "-per", fmt.Sprint(per), "-rate", fmt.Sprint(rate / float64(n))}
		procs = append(procs, startLoad(t, args))
	}
	return procs
}

func startLoad(t *testing.T, args []string) *loadProc {
	t.Helper()
	l := &loadProc{cmd: exec.Command(muxLoadBinary, args...), events: make(chan loadReport, 8)}
	l.cmd.Stderr = os.Stderr
	var err error
	if l.stdin, err = l.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := l.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r loadReport
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				r = loadReport{Event: "error", Error: "not a report: " + sc.Text()}
			}
			l.events <- r
		}
		close(l.events)
	}()
	t.Cleanup(func() {
		l.stdin.Close() // muxload closes its clients and exits
		done := make(chan struct{})
		go func() { l.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			l.cmd.Process.Kill()
			<-done
		}
	})
	return l
}

// await waits for the process's next report and fails the test unless it is event.
func (l *loadProc) await(t *testing.T, event string, timeout time.Duration) loadReport {
	t.Helper()
	select {
	case r, ok := <-l.events:
		if !ok {
			t.Fatalf("muxload %d exited before %q", l.cmd.Process.Pid, event)
		}
		if r.Event != event {
			t.Fatalf("muxload %d: %q (%s), want %q", l.cmd.Process.Pid, r.Event, r.Error, event)
		}
		return r
	case <-time.After(timeout):
		t.Fatalf("muxload %d: no %q within %v", l.cmd.Process.Pid, event, timeout)
	}
	return loadReport{}
}

// send tells the process to send its messages.
func (l *loadProc) send(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(l.stdin, "send\n"); err != nil {
		t.Fatal(err)
	}
}

// procSampler records the peak descriptors and RSS of a process, sampled every 200 ms.
type procSampler struct {
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	fds  int
	rss  int64
}

func sampleProc(pid int) *procSampler {
	s := &procSampler{done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				s.fds = max(s.fds, len(ents))
			}
			if rss, err := procStatus(pid, "VmRSS"); err == nil {
				s.rss = max(s.rss, rss)
			}
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling (once) and returns the peaks.
func (s *procSampler) stop() (fds int, rss int64) {
	s.once.Do(func() { close(s.done) })
	s.wg.Wait()
	return s.fds, s.rss
}

// procStatus reads a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			_, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
