//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/bench/speaker"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// The proxy-bound benchmark's load generator. It runs in one process with the speaker (the
// far end), pinned to one CPU, so it must cost less per message than the path under test:
// frames are encoded field by field (speaker's wire helpers), payload sections are built once
// and written from memory (large ones by writev beside their header), reads and writes move
// up to speaker.IOSize at once, payloads received are skipped without being held.
//
// A fleet is N connections through one path, all producers or all consumers, opened once and
// driven through every workload in turn:
//   - a producer connection has one producer and pipelines SENDs within a window of frames
//     in flight; each SEND_RECEIPT frees a slot;
//   - a consumer connection subscribes anew for each workload (the topic tells the speaker
//     what to deliver), grants a window of permits with FLOW, and grants again (FLOW plus a
//     cumulative ACK) each time half the window has arrived.
//
// Windows are sized so that all connections together hold at most inflightBudget bytes in
// flight; where even one frame per connection is more than that (1 MiB messages over 100
// connections), a semaphore over all connections takes its place.

const (
	benchNamespace = "public/bench"
	inflightBudget = 64 << 20 // bytes in flight over all connections of a fleet
	connBudget     = 16 << 20 // bytes in flight on one connection
	maxWindow      = 1000     // frames in flight per producer (messages per consumer): clients' default queue
	latencyRing    = 1024     // send times kept per connection, by sequence id; > maxWindow
	setupParallel  = 32       // connections opened at once
)

const (
	roleProducer = "producer"
	roleConsumer = "consumer"
)

// workload is one kind of message: size bytes each, batch to a SEND or MESSAGE frame.
type workload struct {
	Size  int `json:"messageSize"`
	Batch int `json:"batch"`
}

func (w workload) label() string {
	if w.Batch > 1 {
		return fmt.Sprintf("%s ×%d", bytesLabel(w.Size), w.Batch)
	}
	return bytesLabel(w.Size)
}

// flagName is the label as -workloads and the profiles' file names spell it.
func (w workload) flagName() string {
	return strings.NewReplacer(" ", "", "×", "x").Replace(w.label())
}

func bytesLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// frameBytes is the size of one frame of w on the wire (header and command approximated).
func (w workload) frameBytes(payloadSection int) int { return payloadSection + 32 }

// windows returns the frames in flight per connection and, when the per-connection windows of
// n connections cannot fit the budget even at one frame, the tokens of a fleet-wide semaphore.
func windows(role string, w workload, frameBytes, n int) (window int, tokens int64) {
	limit := maxWindow
	if role == roleConsumer {
		limit = max(1, maxWindow/w.Batch)
	}
	window = max(1, min(limit, connBudget/frameBytes))
	if n*window*frameBytes > inflightBudget {
		window = max(1, inflightBudget/(n*frameBytes))
	}
	if n*window*frameBytes > inflightBudget {
		tokens = int64(max(1, inflightBudget/frameBytes))
	}
	return window, tokens
}

// fleet is n connections through one path.
type fleet struct {
	role    string
	ep      endpoint
	conns   []*gconn
	closing atomic.Bool
	run     atomic.Pointer[runState]

	errMu sync.Mutex
	err   error // the first failure of a connection
}

func (f *fleet) fail(err error) {
	f.errMu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.errMu.Unlock()
}

func (f *fleet) failure() error {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return f.err
}

// gconn is one connection of a fleet.
type gconn struct {
	f   *fleet
	n   int
	c   *net.TCPConn
	wmu sync.Mutex
	ctl chan *pb.BaseCommand // answers to requests (SUCCESS, ERROR, ...)

	done chan struct{} // the reader ended

	// producers
	seq      uint64 // the driver's
	inflight atomic.Int64
	wake     chan struct{}
	sentAt   []atomic.Int64 // latency runs: when the frame with sequence id s was written, at [s%latencyRing]

	// consumers
	consumerID atomic.Uint64
	consumed   atomic.Int64 // frames since the last FLOW
	lastEntry  atomic.Uint64
}

// runState is one workload's run over a fleet.
type runState struct {
	w        workload
	payload  []byte
	window   int
	sem      *semaphore.Weighted
	ctx      context.Context // done when the run stops
	stop     context.CancelFunc
	rate     float64 // messages a second over the fleet; 0 = as fast as windows allow
	tick     time.Duration
	messages atomic.Int64 // acknowledged (producers) or received (consumers)
	frames   atomic.Int64

	latency   bool
	measuring atomic.Bool
	latMu     sync.Mutex
	lat       []time.Duration
}

var epoch = time.Now()

func sinceEpoch() int64 { return int64(time.Since(epoch)) }

// dialFleet opens n connections of role through ep. It returns the fleet with the
// connections opened so far and the first error.
func dialFleet(ep endpoint, role string, n int) (*fleet, error) {
	f := &fleet{role: role, ep: ep, conns: make([]*gconn, n)}
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Bool
	for range min(n, setupParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				g, err := f.dial(i)
				if err != nil {
					f.fail(fmt.Errorf("connection %d of %d: %w", i+1, n, err))
					failed.Store(true)
					return
				}
				f.conns[i] = g
			}
		}()
	}
	wg.Wait()
	if err := f.failure(); err != nil {
		opened := f.conns[:0]
		for _, g := range f.conns {
			if g != nil {
				opened = append(opened, g)
			}
		}
		f.conns = opened
		return f, err
	}
	return f, nil
}

// dial opens connection i: CONNECT (through a proxy with proxy_to_broker_url, with the
// path's token if it has one), and for a producer fleet the connection's producer.
func (f *fleet) dial(i int) (*gconn, error) {
	c, err := net.DialTimeout("tcp", f.ep.addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	g := &gconn{f: f, n: i, c: tc, ctl: make(chan *pb.BaseCommand, 4), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	bufSize := speaker.IOSize
	if len(f.conns) > 1000 {
		bufSize = 16 << 10 // thousands of connections, each with a small window
	}
	r := speaker.NewReader(tc, 4<<10, bufSize, nil)
	tc.SetDeadline(time.Now().Add(60 * time.Second))
	connect := &pb.CommandConnect{ClientVersion: proto.String("pulsar-proxy-bench"), ProtocolVersion: proto.Int32(21)}
	if f.ep.target != "" {
		connect.ProxyToBrokerUrl = proto.String(f.ep.target)
	}
	if f.ep.token != "" {
		connect.AuthMethodName = proto.String("token")
		connect.AuthData = []byte(f.ep.token)
	}
	fail := func(err error) (*gconn, error) {
		tc.SetLinger(0)
		tc.Close()
		return nil, err
	}
	if err := frame.WriteCommand(tc, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: connect}); err != nil {
		return fail(err)
	}
	if _, err := expect(r, pb.BaseCommand_CONNECTED); err != nil {
		return fail(fmt.Errorf("CONNECT: %w", err))
	}
	if f.role == roleProducer {
		if err := frame.WriteCommand(tc, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
			Topic: proto.String(fmt.Sprintf("persistent://%s/p-%d", benchNamespace, i)), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1),
		}}); err != nil {
			return fail(err)
		}
		if _, err := expect(r, pb.BaseCommand_PRODUCER_SUCCESS); err != nil {
			return fail(fmt.Errorf("PRODUCER: %w", err))
		}
	}
	tc.SetDeadline(time.Time{})
	go g.read(r)
	return g, nil
}

// expect reads the answer to a request during the handshake (PINGs answered).
func expect(r *speaker.Reader, want pb.BaseCommand_Type) (*pb.BaseCommand, error) {
	for {
		cmd, _, err := r.Next()
		if err != nil {
			return nil, err
		}
		c, err := frame.Decode(cmd)
		if err != nil {
			return nil, err
		}
		switch c.GetType() {
		case want:
			return c, nil
		case pb.BaseCommand_PING, pb.BaseCommand_PONG:
			continue
		}
		return nil, fmt.Errorf("want %v, got %v", want, c)
	}
}

// close resets every connection (SO_LINGER 0: no TIME_WAIT left behind) and waits for the
// readers.
func (f *fleet) close() {
	f.closing.Store(true)
	for _, g := range f.conns {
		g.c.SetLinger(0)
		g.c.Close()
	}
	for _, g := range f.conns {
		<-g.done
	}
}

func (g *gconn) write(b []byte) error {
	g.wmu.Lock()
	_, err := g.c.Write(b)
	g.wmu.Unlock()
	return err
}

// read is the connection's reader: it counts receipts and messages as they come, frees
// window slots, answers PINGs and hands every other command to ctl.
func (g *gconn) read(r *speaker.Reader) {
	defer close(g.done)
	var pong []byte
	for {
		cmd, _, err := r.Next()
		if err != nil {
			if !g.f.closing.Load() {
				g.f.fail(fmt.Errorf("connection %d: %w", g.n+1, err))
			}
			return
		}
		if err := g.handle(cmd, r, &pong); err != nil {
			g.f.fail(err)
			return
		}
	}
}

// handle acts on one command the reader read; an error ends the reader. pong holds the PONG
// frame once one was needed.
func (g *gconn) handle(cmd []byte, r *speaker.Reader, pong *[]byte) error {
	t, err := frame.PeekType(cmd)
	if err != nil {
		return fmt.Errorf("connection %d: %w", g.n+1, err)
	}
	st := g.f.run.Load()
	switch t {
	case pb.BaseCommand_SEND_RECEIPT:
		return g.receipt(cmd, st, r)
	case pb.BaseCommand_MESSAGE:
		return g.message(cmd, st)
	case pb.BaseCommand_PING:
		if *pong == nil {
			*pong, _ = frame.AppendCommand(nil, frame.Pong())
		}
		if err := g.write(*pong); err != nil && !g.f.closing.Load() {
			g.f.fail(err)
		}
	case pb.BaseCommand_PONG:
	default:
		return g.control(cmd)
	}
	return nil
}

// receipt counts a SEND_RECEIPT towards the run st (if one is under way), takes its round
// trip in a latency run's measured interval, and frees its window slot.
func (g *gconn) receipt(cmd []byte, st *runState, r *speaker.Reader) error {
	_, seq, ok := speaker.Receipt(cmd)
	if !ok {
		return fmt.Errorf("connection %d: bad SEND_RECEIPT", g.n+1)
	}
	if st != nil {
		st.messages.Add(int64(st.w.Batch))
		st.frames.Add(1)
		if st.latency && g.sentAt != nil && st.measuring.Load() {
			d := time.Duration(int64(r.LastRead().Sub(epoch)) - g.sentAt[seq%latencyRing].Load())
			st.latMu.Lock()
			st.lat = append(st.lat, d)
			st.latMu.Unlock()
		}
		if st.sem != nil {
			st.sem.Release(1)
		}
	}
	g.inflight.Add(-1)
	g.wakeDriver()
	return nil
}

// message counts a MESSAGE of the connection's current consumer towards the run st, and wakes
// the driver to grant permits again once half the window has arrived.
func (g *gconn) message(cmd []byte, st *runState) error {
	id, _, entry, ok := speaker.Message(cmd)
	if !ok {
		return fmt.Errorf("connection %d: bad MESSAGE", g.n+1)
	}
	if st == nil || id != g.consumerID.Load() {
		return nil // a closed consumer's last messages
	}
	st.messages.Add(int64(st.w.Batch))
	st.frames.Add(1)
	g.lastEntry.Store(entry)
	if st.sem != nil {
		st.sem.Release(1)
	}
	if g.consumed.Add(1) >= int64(max(1, st.window/2)) {
		g.wakeDriver()
	}
	return nil
}

// wakeDriver wakes the connection's driver if it waits for room; a wake-up already pending
// is enough.
func (g *gconn) wakeDriver() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// control hands an answer to a request to ctl; a command nobody waits for fails the fleet
// (the reader goes on), one that does not decode ends the reader.
func (g *gconn) control(cmd []byte) error {
	c, err := frame.Decode(cmd)
	if err != nil {
		return err
	}
	select {
	case g.ctl <- c:
	default:
		g.f.fail(fmt.Errorf("connection %d: unexpected %v", g.n+1, c))
	}
	return nil
}

// request sends cmd and waits for the answer to requestID.
func (g *gconn) request(cmd *pb.BaseCommand, requestID uint64) (*pb.BaseCommand, error) {
	b, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		return nil, err
	}
	if err := g.write(b); err != nil {
		return nil, err
	}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case c := <-g.ctl:
			if id, ok := frame.RequestID(c); ok && id == requestID {
				if c.GetType() == pb.BaseCommand_ERROR {
					return c, fmt.Errorf("%v: %s", c.GetError().GetError(), c.GetError().GetMessage())
				}
				return c, nil
			}
		case <-g.done:
			return nil, errors.New("connection closed")
		case <-timeout:
			return nil, fmt.Errorf("no answer to request %d in 60 s", requestID)
		}
	}
}

// forEach runs fn on every connection, setupParallel at a time, and returns the first error.
func (f *fleet) forEach(fn func(*gconn) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first error
	var mu sync.Mutex
	for range min(len(f.conns), setupParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(f.conns) {
					return
				}
				if err := fn(f.conns[i]); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("connection %d: %w", i+1, err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// loadRun is one workload driven over a fleet.
type loadRun struct {
	w       workload
	rate    float64       // messages a second over the fleet, 0 = unpaced
	tick    time.Duration // the pacer's interval
	latency bool          // keep round-trip times of the measured interval
	warmup  time.Duration
	measure time.Duration
	// onMeasure, if set, is called as the measured interval starts (true) and ends (false).
	onMeasure func(start bool)
}

type fleetResult struct {
	Messages  int64
	Seconds   float64
	Latencies []time.Duration
}

var requestIDs atomic.Uint64

// drive runs l over the fleet: it starts every connection's driver, lets the warm-up pass,
// counts messages over the measured interval, stops the drivers and waits until the
// connections are quiet again.
func (f *fleet) drive(l loadRun) (fleetResult, error) {
	if err := f.failure(); err != nil {
		return fleetResult{}, err
	}
	st := f.newRunState(l)
	defer st.stop()
	if f.role == roleConsumer {
		if err := f.subscribe(l.w); err != nil {
			return fleetResult{}, fmt.Errorf("subscribe: %w", err)
		}
	}
	f.run.Store(st)
	defer f.run.Store(nil)
	res, err := f.measure(st, l)
	if err != nil {
		return res, err
	}
	// Quiet again: every SEND answered, every consumer closed (its last messages read).
	if f.role == roleProducer {
		return res, f.waitAnswered()
	}
	return res, f.closeConsumers()
}

// newRunState prepares l's run over the fleet: its payload, the windows, and the semaphore
// where the windows alone would hold too much in flight.
func (f *fleet) newRunState(l loadRun) *runState {
	payload := speaker.PayloadSection("bench", l.w.Size, l.w.Batch)
	fb := l.w.frameBytes(len(payload))
	window, tokens := windows(f.role, l.w, fb, len(f.conns))
	ctx, stop := context.WithCancel(context.Background())
	st := &runState{w: l.w, payload: payload, window: window, ctx: ctx, stop: stop, rate: l.rate, tick: l.tick, latency: l.latency}
	if tokens > 0 {
		st.sem = semaphore.NewWeighted(tokens)
	}
	return st
}

// subscribe makes a new consumer on every connection; the topic tells the speaker what to
// send.
func (f *fleet) subscribe(w workload) error {
	return f.forEach(func(g *gconn) error {
		id := requestIDs.Add(1)
		g.consumerID.Store(id)
		g.consumed.Store(0)
		_, err := g.request(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(speaker.Topic(benchNamespace, w.Size, w.Batch, g.n)), Subscription: proto.String("bench"),
			SubType: pb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id),
		}}, id)
		return err
	})
}

// measure starts every connection's driver for st, lets l's warm-up pass, counts over its
// measured interval and stops the drivers; the error is a driver's or the fleet's.
func (f *fleet) measure(st *runState, l loadRun) (fleetResult, error) {
	var wg sync.WaitGroup
	drvErr := make(chan error, len(f.conns))
	for _, g := range f.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if f.role == roleProducer {
				err = g.produce(st)
			} else {
				err = g.consume(st)
			}
			if err != nil && st.ctx.Err() == nil {
				drvErr <- err
			}
		}()
	}
	time.Sleep(l.warmup)
	res := st.count(l)
	st.stop()
	wg.Wait()
	st.latMu.Lock()
	res.Latencies = st.lat
	st.latMu.Unlock()
	select {
	case err := <-drvErr:
		return res, err
	default:
	}
	return res, f.failure()
}

// count counts the messages over l's measured interval, calling l.onMeasure as it starts and
// ends.
func (st *runState) count(l loadRun) fleetResult {
	if l.onMeasure != nil {
		l.onMeasure(true)
	}
	st.measuring.Store(true)
	m0, t0 := st.messages.Load(), time.Now()
	time.Sleep(l.measure)
	m1, t1 := st.messages.Load(), time.Now()
	st.measuring.Store(false)
	if l.onMeasure != nil {
		l.onMeasure(false)
	}
	return fleetResult{Messages: m1 - m0, Seconds: t1.Sub(t0).Seconds()}
}

// waitAnswered waits until every SEND of the fleet is answered, 60 s at most.
func (f *fleet) waitAnswered() error {
	deadline := time.Now().Add(60 * time.Second)
	for _, g := range f.conns {
		var err error
		if !wait.Within(time.Until(deadline), func() bool {
			if g.inflight.Load() == 0 {
				return true
			}
			err = f.failure()
			return err != nil
		}) {
			return fmt.Errorf("connection %d: %d SENDs unanswered 60 s after the run", g.n+1, g.inflight.Load())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// closeConsumers closes every connection's consumer.
func (f *fleet) closeConsumers() error {
	if err := f.forEach(func(g *gconn) error {
		id := requestIDs.Add(1)
		_, err := g.request(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(g.consumerID.Load()), RequestId: proto.Uint64(id)}}, id)
		return err
	}); err != nil {
		return fmt.Errorf("close consumer: %w", err)
	}
	return f.failure()
}

// produce is a producer connection's driver: SENDs within the window (and the fleet's
// semaphore where set), small frames gathered into writes of up to speaker.IOSize, large ones
// written with their shared payload section by writev. Paced, it sends at the pacer's ticks
// only, everything due then: sending whatever became due a microsecond after the last write
// would make one write per message and cost the load process more than the path under test.
func (g *gconn) produce(st *runState) error {
	s := sender{g: g, st: st, perWrite: int64(max(1, speaker.IOSize/(len(st.payload)+32))), large: len(st.payload) >= 16<<10}
	if st.latency && g.sentAt == nil {
		g.sentAt = make([]atomic.Int64, latencyRing)
	}
	if st.rate <= 0 {
		for st.ctx.Err() == nil {
			if err := s.send(s.perWrite); err != nil {
				return err
			}
		}
		return nil
	}
	pace, err := newPacer(st.tick)
	if err != nil {
		return err
	}
	defer pace.close()
	rate := st.rate / float64(len(g.f.conns)) / float64(st.w.Batch) // frames a second
	start := time.Now()
	var sent int64
	for st.ctx.Err() == nil {
		if err := pace.wait(); err != nil {
			return err
		}
		for due := int64(time.Since(start).Seconds()*rate) - sent; due > 0 && st.ctx.Err() == nil; {
			k := min(due, s.perWrite)
			if err := s.send(k); err != nil {
				return err
			}
			due -= s.last
			sent += s.last
		}
	}
	return nil
}

// sender writes a producer connection's SENDs.
type sender struct {
	g        *gconn
	st       *runState
	perWrite int64
	large    bool
	buf      []byte
	bufs     net.Buffers
	offs     []int
	last     int64 // frames the last send wrote
}

// send writes up to k frames, as many as the window (and semaphore) allow, waiting for room
// if there is none; it sets s.last.
func (s *sender) send(k int64) error {
	g, st := s.g, s.st
	s.last = 0
	free := int64(st.window) - g.inflight.Load()
	if free <= 0 {
		select {
		case <-g.wake:
		case <-st.ctx.Done():
		}
		return nil
	}
	k = min(k, free)
	if st.sem != nil {
		if !st.sem.TryAcquire(k) {
			if err := st.sem.Acquire(st.ctx, 1); err != nil {
				return nil
			}
			k = 1
		}
	}
	payload := st.payload
	s.buf, s.bufs, s.offs = s.buf[:0], s.bufs[:0], s.offs[:0]
	for range k {
		s.offs = append(s.offs, len(s.buf))
		s.buf = speaker.AppendSend(s.buf, 1, g.seq, st.w.Batch, len(payload))
		g.seq++
		if !s.large {
			s.buf = append(s.buf, payload...)
		}
	}
	if s.large {
		for i, at := range s.offs {
			end := len(s.buf)
			if i+1 < len(s.offs) {
				end = s.offs[i+1]
			}
			s.bufs = append(s.bufs, s.buf[at:end], payload)
		}
	}
	g.inflight.Add(k)
	if g.sentAt != nil {
		now := sinceEpoch()
		for q := g.seq - uint64(k); q < g.seq; q++ {
			g.sentAt[q%latencyRing].Store(now)
		}
	}
	g.wmu.Lock()
	var err error
	if s.large {
		w := s.bufs
		_, err = w.WriteTo(g.c)
	} else {
		_, err = g.c.Write(s.buf)
	}
	g.wmu.Unlock()
	s.last = k
	return err
}

// consume is a consumer connection's driver: the first FLOW grants the window, and each time
// half of it has arrived the reader wakes the driver, which grants that much again (with a
// cumulative ACK up to the last message, as a client acknowledges).
func (g *gconn) consume(st *runState) error {
	batch := uint32(st.w.Batch)
	grant := func(frames int64) error {
		if st.sem != nil {
			if err := st.sem.Acquire(st.ctx, frames); err != nil {
				return nil
			}
		}
		b := speaker.AppendFlow(nil, g.consumerID.Load(), uint32(frames)*batch)
		if e := g.lastEntry.Load(); e > 0 {
			b = speaker.AppendAck(b, g.consumerID.Load(), 2, e)
		}
		return g.write(b)
	}
	if err := grant(int64(st.window)); err != nil {
		return err
	}
	half := int64(max(1, st.window/2))
	for {
		select {
		case <-g.wake:
		case <-st.ctx.Done():
			return nil
		}
		if n := g.consumed.Load(); n >= half {
			g.consumed.Add(-n)
			if err := grant(n); err != nil {
				return err
			}
		}
	}
}
