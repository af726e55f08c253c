package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// isolationQueueBytes is the proxy's per-client queue bound in the isolation test: far below
// what the stuck client's permits let the broker send it (500 to 1,000 messages of 128 KiB).
const isolationQueueBytes = 8 << 20

// TestMultiplexStuckNeighbourIsolation: two clients consume at full rate (each its own
// connection to the proxy and its own topic, a producer of 100 1-KiB messages a second each,
// a pace a loaded two-core machine keeps) while a third client (testdata/muxclient, a real
// process) on the same shared broker connection
// is stopped with SIGSTOP, so its socket is no longer read, and its topic is fed 128 KiB
// messages its consumer has permits for. Asserted: all three share one broker connection
// (the broker's topic stats), the stuck client is disconnected and counted as a slow
// consumer, the proxy's heap does not take what the stuck client's permits allow (at most twice
// the bound), the two others receive every message, in order, and at no less than half the
// rate they had before the third got stuck, both on average and in their worst two seconds
// (a stall the backlog then makes up for passes the average, not the worst span). Logged side by side: their throughput and
// end-to-end latency before the neighbour got stuck, while it was stuck, and after it was
// disconnected; the proxy's heap and RSS in each phase against the bound.
func TestMultiplexStuckNeighbourIsolation(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), fmt.Sprintf("broker:\n  multiplex: true\n  multiplexConnections: 1\n  multiplexClientQueueBytes: %d\nsession:\n  passthrough: false\n", isolationQueueBytes))
	fastTopics := []string{uniqueTopic(t, "mux-iso-fast0"), uniqueTopic(t, "mux-iso-fast1")}
	stuckTopic := uniqueTopic(t, "mux-iso-stuck")
	for _, topic := range append(slices.Clone(fastTopics), stuckTopic) {
		if err := theRig.PlaceTopic(testCtx(t), topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	fast := make([]*paceConsumer, len(fastTopics))
	for i, topic := range fastTopics {
		fast[i] = &paceConsumer{c: subscribe(t, newClient(t, proxy.PulsarURL), topic, "fast", pulsar.Exclusive)}
	}
	stuck := startStuckClient(t, proxy.PulsarURL, stuckTopic)
	checkOneBrokerConnection(t, append(slices.Clone(fastTopics), stuckTopic))

	mem := sampleMemory(t, proxy)
	defer mem.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The same load in every phase: the fast topics, and the stuck client's topic fed
	// 128 KiB messages, which it reads until it is stopped.
	pc := newClient(t, proxy.PulsarURL)
	var wg sync.WaitGroup
	for i, topic := range fastTopics {
		p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() { defer wg.Done(); fast[i].produce(ctx, p, 10*time.Millisecond) }()
		go func() { defer wg.Done(); fast[i].consume() }()
	}
	var fed atomic.Int64
	wg.Add(1)
	go func() { defer wg.Done(); feedStuck(ctx, t, pc, stuckTopic, &fed) }()
	warmUp(t, fast)

	alone, stuckWin, after := phases(t, proxy, stuck, &fed, 10*time.Second)
	cancel()
	wg.Wait()

	if n := proxy.count(t, "pulsar_proxy_session_closes_total", `reason="slow_consumer"`); n < 1 {
		t.Fatalf("session closes for slow_consumer: %v", n)
	}
	for i, f := range fast {
		f.check(t, i)
	}
	heap := mem.stop()
	for _, w := range []window{alone, stuckWin, after} {
		t.Logf("RESULT %s", w.report(fast, heap))
	}
	// Without the bound the proxy would hold what the stuck client's permits let the broker
	// send (at least 500 messages of 128 KiB: the client asks for more at half its queue).
	grew := heap.peak(stuckWin, heapInUse) - heap.peak(alone, heapInUse)
	t.Logf("RESULT stuck client: disconnected as a slow consumer %v after SIGSTOP, %s fed to its topic meanwhile; the proxy's heap in use grew by %s (multiplexClientQueueBytes %s)",
		stuckWin.end.Sub(stuckWin.start).Round(time.Millisecond), mib(stuckWin.fed*stuckMessageBytes), mib(grew), mib(isolationQueueBytes))
	// The bound plus what is in flight around it (a few frames being read and written, the
	// garbage of the queue's turnover): twice the bound, where the unbounded proxy would take
	// 62.5 to 125 MiB.
	if grew > 2*isolationQueueBytes {
		t.Errorf("the proxy's heap grew by %s while the client was stuck, more than twice the bound %s", mib(grew), mib(isolationQueueBytes))
	}
	// The headline: the others go on at the pace they had while the third read. A shared
	// connection held up by the stuck client would bring them to (nearly) nothing; the
	// producers' pace is the same in both windows, so the two rates are compared side by side.
	if before, during := alone.rate(fast), stuckWin.rate(fast); during < before/2 {
		t.Errorf("the other clients received %.0f msg/s while the third was stuck, less than half the %.0f msg/s before", during, before)
	}
	// A window's average hides a stall that the backlog then makes up for: its worst two
	// seconds must also keep half the pace of the worst two seconds before.
	worstBefore := alone.worstRate(fast)
	for _, w := range []window{stuckWin, after} {
		if worst := w.worstRate(fast); worst < worstBefore/2 {
			t.Errorf("%s: the other clients' worst two seconds had %.0f msg/s, less than half the %.0f msg/s of the worst two seconds before", w.name, worst, worstBefore)
		}
	}
}

// worstRate is the fast clients' lowest rate together, in msg/s, over the whole two-second
// spans of w (+Inf when w is shorter than one).
func (w window) worstRate(fast []*paceConsumer) float64 {
	const span = 2 * time.Second
	counts := make([]int, int(w.end.Sub(w.start)/span))
	for _, f := range fast {
		for _, s := range f.samples {
			if i := int(s.at.Sub(w.start) / span); w.has(s.at) && i < len(counts) {
				counts[i]++
			}
		}
	}
	if len(counts) == 0 {
		return math.Inf(1)
	}
	return float64(slices.Min(counts)) / span.Seconds()
}

// rate is how many messages per second the fast clients received together in w.
func (w window) rate(fast []*paceConsumer) float64 {
	n := 0
	for _, f := range fast {
		for _, s := range f.samples {
			if w.has(s.at) {
				n++
			}
		}
	}
	return float64(n) / w.end.Sub(w.start).Seconds()
}

// warmUp waits, unmeasured, until each fast consumer has received a second's worth of its
// producer's messages (the topics' first ledgers, the clients' first permits), then a few
// seconds more. Not "caught up": on a loaded machine receipts and deliveries are both in
// flight, and a consumer may never be seen holding every message whose receipt came back.
func warmUp(t *testing.T, fast []*paceConsumer) {
	t.Helper()
	wait.Until(t, 2*time.Minute, "the fast consumers to receive their first 100 messages", func() bool {
		return fast[0].receivedAtLeast(100) && fast[1].receivedAtLeast(100)
	})
	time.Sleep(3 * time.Second)
}

// phases runs the measured phases: length with the neighbour reading, from its SIGSTOP until
// the proxy disconnects it as a slow consumer, and length after that.
func phases(t *testing.T, proxy *proxy, stuck *exec.Cmd, fed *atomic.Int64, length time.Duration) (alone, stopped, after window) {
	t.Helper()
	alone = window{name: "neighbour reading", start: time.Now()}
	time.Sleep(length)
	alone.end = time.Now()

	before := proxy.metric(t, "pulsar_proxy_multiplex_slow_consumer_disconnects_total")
	stuck.Process.Signal(syscall.SIGSTOP)
	stopped = window{name: "neighbour stopped", start: time.Now()}
	fedBefore := fed.Load()
	wait.Until(t, 3*time.Minute, "the stopped client to be disconnected as a slow consumer", func() bool {
		return proxy.metric(t, "pulsar_proxy_multiplex_slow_consumer_disconnects_total") > before
	})
	stopped.end, stopped.fed = time.Now(), fed.Load()-fedBefore

	after = window{name: "neighbour disconnected", start: time.Now()}
	time.Sleep(length)
	after.end = time.Now()
	return alone, stopped, after
}

// stuckMessageBytes is the size of the messages fed to the stuck client's topic.
const stuckMessageBytes = 128 << 10

// startStuckClient runs testdata/muxclient on topic (subscription "stuck", 1,000 permits)
// and returns it once its first message went round; it is killed when the test ends.
func startStuckClient(t *testing.T, url, topic string) *exec.Cmd {
	t.Helper()
	child := exec.Command(muxClientBinary, url, topic, "stuck")
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatal("muxclient did not get ready")
	}
	return child
}

// checkOneBrokerConnection checks that the broker lists every consumer of topics at one
// address: one shared connection from the proxy.
func checkOneBrokerConnection(t *testing.T, topics []string) {
	t.Helper()
	addrs := map[string]bool{}
	for _, topic := range topics {
		st, err := theRig.TopicStats(testCtx(t), topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range st.Subscriptions {
			for _, c := range sub.Consumers {
				addrs[c.Address] = true
			}
		}
	}
	if len(addrs) != 1 {
		t.Fatalf("the consumers reach the broker over %d connections (%v), want one shared connection", len(addrs), addrs)
	}
}

// feedStuck sends stuckMessageBytes messages to topic, 16 a second (2 MiB/s), until ctx
// ends, counting them in fed.
func feedStuck(ctx context.Context, t *testing.T, c pulsar.Client, topic string, fed *atomic.Int64) {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Errorf("stuck topic's producer: %v", err)
		return
	}
	defer p.Close()
	payload := make([]byte, stuckMessageBytes)
	tick := time.NewTicker(time.Second / 16)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(pulsar.MessageID, *pulsar.ProducerMessage, error) {})
		fed.Add(1)
	}
}

// paceConsumer is one fast client: a paced producer on its topic and its consumer, which
// checks the order and records each message's end-to-end latency.
type paceConsumer struct {
	c        pulsar.Consumer
	mu       sync.Mutex
	sent     int
	done     bool // the producer stopped; sent is final
	received int
	samples  []latencySample
	err      error
}

type latencySample struct {
	at      time.Time
	latency time.Duration
}

// produce sends a 1 KiB message "seq:unix-nanos" every interval until ctx ends, then
// waits for the receipts.
func (f *paceConsumer) produce(ctx context.Context, p pulsar.Producer, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var sends sync.WaitGroup
	for seq := 0; ctx.Err() == nil; seq++ {
		select {
		case <-ctx.Done():
		case <-tick.C:
			payload := make([]byte, 1024)
			copy(payload, fmt.Sprintf("%d:%d:", seq, time.Now().UnixNano()))
			sends.Add(1)
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer sends.Done()
				f.mu.Lock()
				defer f.mu.Unlock()
				if err != nil && f.err == nil {
					f.err = fmt.Errorf("send: %w", err)
				}
				if err == nil {
					f.sent++
				}
			})
		}
	}
	sends.Wait()
	f.mu.Lock()
	f.done = true
	f.mu.Unlock()
}

// check fails the test unless the client received every message sent to it, in order.
func (f *paceConsumer) check(t *testing.T, i int) {
	t.Helper()
	if f.err != nil {
		t.Fatalf("fast client %d: %v", i, f.err)
	}
	if f.received != f.sent {
		t.Fatalf("fast client %d received %d of %d messages", i, f.received, f.sent)
	}
}

// receivedAtLeast reports whether the consumer has received n messages.
func (f *paceConsumer) receivedAtLeast(n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.received >= n
}

// consume receives until the producer is done and everything it sent arrived, checking the
// order; a minute without a message while some are missing is an error.
func (f *paceConsumer) consume() {
	last := time.Now()
	for {
		f.mu.Lock()
		finished := f.done && f.received >= f.sent
		f.mu.Unlock()
		if finished {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		msg, err := f.c.Receive(ctx)
		cancel()
		now := time.Now()
		f.mu.Lock()
		if err != nil {
			if now.Sub(last) > time.Minute {
				f.err = fmt.Errorf("received %d (of %d sent), none for a minute: %w", f.received, f.sent, err)
				f.mu.Unlock()
				return
			}
			f.mu.Unlock()
			continue
		}
		last = now
		parts := strings.SplitN(string(msg.Payload()), ":", 3)
		seq, _ := strconv.Atoi(parts[0])
		nanos, _ := strconv.ParseInt(parts[1], 10, 64)
		if seq != f.received {
			f.err = fmt.Errorf("message %d arrived when %d was next", seq, f.received)
			f.mu.Unlock()
			return
		}
		f.received++
		f.samples = append(f.samples, latencySample{now, now.Sub(time.Unix(0, nanos))})
		f.mu.Unlock()
		f.c.Ack(msg)
	}
}

// window is a phase of the test.
type window struct {
	name       string
	start, end time.Time
	fed        int64 // messages fed to the stuck client's topic in the window
}

func (w window) has(at time.Time) bool { return !at.Before(w.start) && at.Before(w.end) }

// report is the fast clients' rate and latency and the proxy's memory in w.
func (w window) report(fast []*paceConsumer, mem *memSeries) string {
	var lat []time.Duration
	for _, f := range fast {
		for _, s := range f.samples {
			if w.has(s.at) {
				lat = append(lat, s.latency)
			}
		}
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	secs := w.end.Sub(w.start).Seconds()
	return fmt.Sprintf("%s (%.1f s): the %d other clients received %.0f msg/s together, latency p50 %v p99 %v max %v; proxy heap in use %s at most, RSS %s at most",
		w.name, secs, len(fast), float64(len(lat))/secs, q(0.5), q(0.99), q(1), mib(mem.peak(w, heapInUse)), mib(mem.peak(w, rss)))
}

// memSeries samples the proxy's Go heap in use (its /metrics) and RSS every 100 ms.
type memSeries struct {
	mu      sync.Mutex
	samples []memSample
	done    chan struct{}
	wg      sync.WaitGroup
}

type memSample struct {
	at   time.Time
	heap int64
	rss  int64
}

const (
	heapInUse = iota
	rss
)

func sampleMemory(t *testing.T, p *proxy) *memSeries {
	m := &memSeries{done: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			s := memSample{at: time.Now()}
			if sc, err := metrics.Fetch(p.HTTPURL + "/metrics"); err == nil {
				if v, err := sc.Value("go_memstats_heap_inuse_bytes"); err == nil {
					s.heap = int64(v)
				}
			}
			s.rss, _ = procStatus(p.PID(), "VmRSS")
			m.mu.Lock()
			m.samples = append(m.samples, s)
			m.mu.Unlock()
			select {
			case <-m.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return m
}

// stop ends the sampling (it may be called again) and returns the series.
func (m *memSeries) stop() *memSeries {
	select {
	case <-m.done:
	default:
		close(m.done)
	}
	m.wg.Wait()
	return m
}

// peak is the highest sample of kind in w.
func (m *memSeries) peak(w window, kind int) int64 {
	var top int64
	for _, s := range m.samples {
		if w.has(s.at) {
			top = max(top, map[int]int64{heapInUse: s.heap, rss: s.rss}[kind])
		}
	}
	return top
}
