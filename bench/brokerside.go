//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// The brokers' side of multiplexing (-brokers, `make bench-brokers`): Clients producer
// clients, each on a connection of its own to pulsar-proxy, send at a fixed total rate to
// broker 1 of one rig; first through the proxy with one broker connection per client (the
// framed path), then through the same proxy multiplexed, rounds alternating. Each run starts
// a fresh proxy and samples, before the clients connect and again after the measured window
// with them still connected: broker 1's heap after a full GC (jcmd GC.run), its direct
// memory and threads (its own metrics endpoint) and its CPU (/proc), and the proxy's RSS and
// CPU. Results: bench/results/brokers.{json,md,png}.

type brokersConfig struct {
	Clients, Topics       int
	Rate                  float64 // messages a second, all clients together
	Size                  int
	SettleSec, MeasureSec float64
	Rounds                int
	DescriptorLimit       int
	Note                  string
}

var (
	brokersFull  = brokersConfig{Clients: 10000, Topics: 20, Rate: 2000, Size: 1 << 10, SettleSec: 20, MeasureSec: 60, Rounds: 2}
	brokersQuick = brokersConfig{Clients: 1000, Topics: 10, Rate: 1000, Size: 1 << 10, SettleSec: 10, MeasureSec: 20, Rounds: 1}
)

// brokerSample is one moment's figures of broker 1 and the proxy.
type brokerSample struct {
	HeapBytes    float64 `json:"broker_heap_bytes"`   // used, after a full GC
	DirectBytes  float64 `json:"broker_direct_bytes"` // jvm_memory_direct_bytes_used
	Threads      float64 `json:"broker_threads"`      // jvm_threads_current
	Connections  float64 `json:"broker_connections"`  // pulsar_active_connections
	BrokerCPU    float64 `json:"broker_cpu_sec"`      // since the broker started
	ProxyRSSKiB  int64   `json:"proxy_rss_kib"`
	ProxyCPU     float64 `json:"proxy_cpu_sec"` // since the proxy started
	ProxyBrokers float64 `json:"proxy_shared_connections,omitempty"`
}

// brokersRun is one path's run: the samples without and with the clients, and the measured
// window's messages and CPU.
type brokersRun struct {
	Path        string       `json:"path"`
	Round       int          `json:"round"`
	Clients     int          `json:"clients"`
	Idle        brokerSample `json:"idle"`
	Loaded      brokerSample `json:"loaded"`
	Sent        int64        `json:"sent"` // SENDs written over the measured window
	Messages    int64        `json:"messages"`
	SendErrors  int64        `json:"send_errors"`
	MeasuredSec float64      `json:"measured_sec"`
	BrokerCPU   float64      `json:"broker_cpu_sec"` // over the measured window
	ProxyCPU    float64      `json:"proxy_cpu_sec"`
}

type brokersResults struct {
	Config  brokersConfig `json:"config"`
	Machine machine       `json:"machine"`
	Runs    []brokersRun  `json:"runs"`
	Date    string        `json:"date"`
}

// brokersPaths are the two ways through the proxy, in the order of round 0.
var brokersPaths = []string{pathPulsarProxyFramed, pathPulsarProxyMultiplex}

func runBrokersBench(o options) error {
	cfg := brokersFull
	if o.quick {
		cfg = brokersQuick
	}
	cfg.Note = o.note
	if o.clients > 0 {
		cfg.Clients = o.clients
	}
	cfg.DescriptorLimit = descriptorLimit()
	// Each process holds two descriptors a client at most (the proxy: client and broker).
	cfg.Clients = min(cfg.Clients, (cfg.DescriptorLimit-descriptorReserve)/2)
	if o.rerender {
		return rerenderBrokers(o.out)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "pulsar-proxy-brokers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := newBrokersBench(ctx, dir, cfg)
	if err != nil {
		return err
	}
	defer b.stop()
	res := &brokersResults{Config: cfg, Machine: thisMachine(), Date: time.Now().UTC().Format(time.RFC3339)}
	for round := range cfg.Rounds {
		for i := range brokersPaths {
			name := brokersPaths[(i+round)%len(brokersPaths)]
			run, err := b.measure(ctx, name, round)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", name, round, err)
			}
			log("%-24s round %d: %s", name, round, run.line())
			res.Runs = append(res.Runs, run)
		}
	}
	return writeBrokersResults(res, o.out)
}

// brokersBench is the rig, the proxy's binary and the topics the runs share.
type brokersBench struct {
	cfg       brokersConfig
	r         *rig.Rig
	dir, bin  string
	far       string // broker 1's host:port
	brokerPID int
	topics    []string
}

func newBrokersBench(ctx context.Context, dir string, cfg brokersConfig) (*brokersBench, error) {
	r, err := brokersRig(ctx)
	if err != nil {
		return nil, err
	}
	b := &brokersBench{cfg: cfg, r: r, dir: dir}
	if b.brokerPID, err = strconv.Atoi(r.State("BROKER1_PID")); err != nil {
		b.stop()
		return nil, fmt.Errorf("broker 1's pid: %w", err)
	}
	if err := b.prepare(ctx); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// brokersRig attaches to PULSAR_PROXY_RIG or starts a rig whose broker 1 has room for the
// clients (2 GiB of heap).
func brokersRig(ctx context.Context) (*rig.Rig, error) {
	if os.Getenv(rig.EnvAttach) != "" {
		return rig.Start(ctx)
	}
	return rig.StartWith(ctx, rig.Options{Env: []string{"RIG_BROKER1_HEAP=2g"}})
}

// prepare builds the proxy and places the topics on broker 1.
func (b *brokersBench) prepare(ctx context.Context) error {
	var err error
	if b.bin, err = proxyproc.Build(b.dir); err != nil {
		return err
	}
	if b.far, err = brokerAddr(b.r.BrokerURL(1)); err != nil {
		return err
	}
	if err := b.r.CreateNamespace(ctx, benchNamespace, 1); err != nil && !rig.IsStatus(err, 409) {
		return err
	}
	for i := range b.cfg.Topics {
		t := fmt.Sprintf("persistent://%s/brokers-%d", benchNamespace, i)
		if err := b.r.PlaceTopic(ctx, t, 1); err != nil {
			return err
		}
		b.topics = append(b.topics, t)
	}
	return nil
}

func (b *brokersBench) stop() {
	if b.r.Owned() {
		b.r.Stop()
	}
}

// measure runs one path: a fresh proxy, the idle sample, the clients connected and sending,
// the measured window, the loaded sample, and everything closed again.
func (b *brokersBench) measure(ctx context.Context, name string, round int) (brokersRun, error) {
	extra := "log:\n  level: info\n  sessionSummary: \"off\"\n"
	if name == pathPulsarProxyMultiplex {
		extra += "broker:\n  multiplex: true\n"
	}
	p, err := startFramedProxy(b.dir, b.bin, b.far, fmt.Sprintf("%s-%d", name, round), "session:\n  passthrough: false\n"+extra, -1)
	if err != nil {
		return brokersRun{}, err
	}
	defer p.stop()
	run := brokersRun{Path: name, Round: round, Clients: b.cfg.Clients}
	if run.Idle, err = b.sample(ctx, p); err != nil {
		return run, err
	}
	f, err := b.connect(ctx, p.ep)
	if err != nil {
		return run, err
	}
	defer f.close()
	if err := f.window(ctx, &run, b, p); err != nil {
		return run, err
	}
	run.Loaded, err = b.sample(ctx, p)
	return run, err
}

// sample takes broker 1's figures after a full GC, and the proxy's.
func (b *brokersBench) sample(ctx context.Context, p *path) (brokerSample, error) {
	var s brokerSample
	if out, err := exec.CommandContext(ctx, "jcmd", strconv.Itoa(b.brokerPID), "GC.run").CombinedOutput(); err != nil {
		return s, fmt.Errorf("jcmd GC.run: %v: %s", err, out)
	}
	metrics := b.r.Brokers[0].HTTP + "/metrics"
	for _, m := range []struct {
		into        *float64
		name, label string
	}{
		{&s.HeapBytes, "jvm_memory_bytes_used", `area="heap"`}, {&s.DirectBytes, "jvm_memory_direct_bytes_used", ""},
		{&s.Threads, "jvm_threads_current", ""}, {&s.Connections, "pulsar_active_connections", ""},
	} {
		v, err := scrapeSumWith(metrics, m.name, m.label)
		if err != nil {
			return s, fmt.Errorf("broker 1's %s: %w", m.name, err)
		}
		*m.into = v
	}
	var err error
	if s.BrokerCPU, err = cpuSeconds(b.brokerPID); err != nil {
		return s, err
	}
	if s.ProxyRSSKiB, err = memKiB(p.pid, "VmRSS"); err != nil {
		return s, err
	}
	if s.ProxyCPU, err = cpuSeconds(p.pid); err != nil {
		return s, err
	}
	s.ProxyBrokers, _ = scrapeSum(p.metrics, "pulsar_proxy_multiplex_broker_connections")
	return s, nil
}

// producers are the connected clients, each a producer on one of the topics.
type producers struct {
	prods          []*session
	names          []string // the producers' names, as their brokers gave them
	sent, acked    atomic.Int64
	failed         atomic.Int64
	stopSend       context.CancelFunc
	senders, reads sync.WaitGroup
}

// connect opens the clients, fifty at a time.
func (b *brokersBench) connect(ctx context.Context, ep endpoint) (*producers, error) {
	f := &producers{prods: make([]*session, b.cfg.Clients), names: make([]string, b.cfg.Clients)}
	sem := make(chan struct{}, 50)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for i := range f.prods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			l := load{ep: ep, topic: b.topics[i%len(b.topics)]}
			p, name, err := l.openProducer()
			if err != nil {
				select {
				case errs <- fmt.Errorf("client %d: %w", i, err):
				default:
				}
				return
			}
			f.prods[i], f.names[i] = p, name
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		f.close()
		return nil, err
	default:
	}
	log("%d clients connected", len(f.prods))
	return f, ctx.Err()
}

// window sends at the configured rate, lets it settle, and measures.
func (f *producers) window(ctx context.Context, run *brokersRun, b *brokersBench, p *path) error {
	cfg := b.cfg
	sctx, cancel := context.WithCancel(ctx)
	f.stopSend = cancel
	f.start(sctx, cfg)
	time.Sleep(secs(cfg.SettleSec))
	b0, _ := cpuSeconds(b.brokerPID)
	p0, _ := cpuSeconds(p.pid)
	s0, n0, e0, t0 := f.sent.Load(), f.acked.Load(), f.failed.Load(), time.Now()
	select {
	case <-time.After(secs(cfg.MeasureSec)):
	case <-ctx.Done():
		return ctx.Err()
	}
	b1, _ := cpuSeconds(b.brokerPID)
	p1, _ := cpuSeconds(p.pid)
	run.Sent, run.Messages, run.SendErrors, run.MeasuredSec = f.sent.Load()-s0, f.acked.Load()-n0, f.failed.Load()-e0, time.Since(t0).Seconds()
	run.BrokerCPU, run.ProxyCPU = b1-b0, p1-p0
	cancel()
	f.senders.Wait()
	return nil
}

// start runs each client's sender (its share of the rate, a random phase) and receipt reader.
func (f *producers) start(ctx context.Context, cfg brokersConfig) {
	interval := time.Duration(float64(len(f.prods)) / cfg.Rate * float64(time.Second))
	for i, p := range f.prods {
		f.reads.Go(func() { f.readReceipts(p) })
		f.senders.Go(func() { f.send(ctx, p, newSendFrame(f.names[i], cfg.Size), interval) })
	}
}

func (f *producers) send(ctx context.Context, p *session, m *sendFrame, interval time.Duration) {
	t := time.NewTimer(rand.N(interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.send.Send.SequenceId, m.md.SequenceId = proto.Uint64(m.seq), proto.Uint64(m.seq)
		m.md.PublishTime = proto.Uint64(uint64(time.Now().UnixMilli()))
		m.seq++
		if err := p.writeSend(m); err != nil {
			return
		}
		f.sent.Add(1)
		t.Reset(interval)
	}
}

// readReceipts counts the broker's answers to the client's SENDs until its connection closes.
func (f *producers) readReceipts(p *session) {
	for {
		cmd, err := p.readCommand()
		if err != nil {
			return
		}
		switch {
		case p.answerPing(cmd):
		case cmd.GetType() == pb.BaseCommand_SEND_RECEIPT:
			f.acked.Add(1)
		case cmd.GetType() == pb.BaseCommand_SEND_ERROR:
			f.failed.Add(1)
		}
	}
}

func (f *producers) close() {
	if f.stopSend != nil {
		f.stopSend()
	}
	f.senders.Wait()
	for _, p := range f.prods {
		if p != nil {
			p.conn.Close()
		}
	}
	f.reads.Wait()
}

// writeSend writes m's SEND at once.
func (s *session) writeSend(m *sendFrame) error {
	var err error
	if m.buf, err = frame.AppendPayloadCommand(m.buf[:0], m.send, nil, m.md, m.payload); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err = s.w.Write(m.buf); err != nil {
		return err
	}
	return s.w.Flush()
}
