//go:build linux

package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The load generator speaks the Pulsar protocol itself (with the proxy's frame package), so
// every path carries exactly the same connections and frames: one producer connection that
// pipelines SENDs within a window of unacknowledged messages, one consumer connection that
// grants permits with FLOW and acknowledges cumulatively. Through a proxy it connects the
// way a Pulsar client does after a lookup answered proxy_through_service_url: CONNECT with
// proxy_to_broker_url naming the owning broker. It is lean on purpose: on a two-core machine
// the generator's CPU is taken from the proxies it measures.

const (
	producerWindow  = 1000 // unacknowledged SENDs in flight
	consumerPermits = 1000
)

// endpoint is where a path's clients connect.
type endpoint struct {
	addr   string // host:port to dial
	target string // proxy_to_broker_url for a proxy that needs one, "" otherwise
	token  string // a token for CONNECT (auth_method_name "token"), "" for none
}

// session is one connected protocol session.
type session struct {
	conn net.Conn
	r    *frame.Reader
	wmu  sync.Mutex
	w    *bufio.Writer
}

func dial(ep endpoint, withTarget bool) (*session, error) {
	c, err := net.DialTimeout("tcp", ep.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	s := &session{conn: c, r: frame.NewReader(c, frame.DefaultMaxFrameSize), w: bufio.NewWriterSize(c, 256<<10)}
	connect := &pb.CommandConnect{ClientVersion: proto.String("pulsar-proxy-bench"), ProtocolVersion: proto.Int32(21)}
	if withTarget && ep.target != "" {
		connect.ProxyToBrokerUrl = proto.String(ep.target)
	}
	if ep.token != "" {
		connect.AuthMethodName, connect.AuthData = proto.String("token"), []byte(ep.token)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := s.write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: connect}, true); err != nil {
		c.Close()
		return nil, err
	}
	cmd, err := s.readCommand()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %w", err)
	}
	if cmd.GetType() != pb.BaseCommand_CONNECTED {
		c.Close()
		return nil, fmt.Errorf("CONNECT answered with %v", cmd)
	}
	c.SetDeadline(time.Time{})
	return s, nil
}

func (s *session) write(cmd *pb.BaseCommand, flush bool) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		return err
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if flush {
		return s.w.Flush()
	}
	return nil
}

func (s *session) readCommand() (*pb.BaseCommand, error) {
	f, err := s.r.ReadFrame()
	if err != nil {
		return nil, err
	}
	return frame.Decode(f.Command)
}

// answerPing keeps the broker's keep-alive happy; it reports whether cmd was a PING.
func (s *session) answerPing(cmd *pb.BaseCommand) bool {
	if cmd.GetType() == pb.BaseCommand_PING {
		s.write(frame.Pong(), true)
		return true
	}
	return false
}

// expect reads until the answer to a request arrives.
func (s *session) expect(t pb.BaseCommand_Type) (*pb.BaseCommand, error) {
	s.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	defer s.conn.SetReadDeadline(time.Time{})
	for {
		cmd, err := s.readCommand()
		if err != nil {
			return nil, err
		}
		if s.answerPing(cmd) {
			continue
		}
		if cmd.GetType() == t {
			return cmd, nil
		}
		return nil, fmt.Errorf("want %v, got %v", t, cmd)
	}
}

// load is one measured run: a producer and a consumer on one topic.
type load struct {
	ep      endpoint
	topic   string
	size    int
	rate    float64 // messages per second; 0 = as fast as the window allows
	warmup  time.Duration
	measure time.Duration
	// onMeasure, if set, is called as the measured interval starts (true) and ends (false).
	onMeasure func(start bool)
}

type loadResult struct {
	Messages  int64
	Bytes     int64 // payload bytes received in the measured interval
	Seconds   float64
	Latencies []time.Duration // measured interval only
}

// run opens the consumer and the producer on l.topic, sends for the warm-up and the measured
// interval, and returns what the consumer counted in that interval.
func (l load) run() (loadResult, error) {
	cons, err := l.subscribe()
	if err != nil {
		return loadResult{}, err
	}
	defer cons.conn.Close()
	prod, name, err := l.openProducer()
	if err != nil {
		return loadResult{}, err
	}
	defer prod.conn.Close()
	base := time.Now()
	s := &loadState{l: l, base: base, measureFrom: base.Add(l.warmup), measureTo: base.Add(l.warmup).Add(l.measure),
		errc: make(chan error, 3), consumed: make(chan loadResult, 1), window: make(chan struct{}, producerWindow)}
	go s.consume(cons)
	go s.readReceipts(prod)
	if err := s.produce(prod, name); err != nil {
		return loadResult{}, err
	}
	res, err := s.collect(cons)
	if err != nil {
		return loadResult{}, err
	}
	res.Seconds = l.measure.Seconds()
	return res, nil
}

// subscribe connects l's consumer and subscribes it to l.topic from the latest message.
func (l load) subscribe() (*session, error) {
	cons, err := dial(l.ep, true)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	if err := cons.write(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(l.topic), Subscription: proto.String("bench"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), InitialPosition: pb.CommandSubscribe_Latest.Enum(),
	}}, true); err != nil {
		cons.conn.Close()
		return nil, err
	}
	if _, err := cons.expect(pb.BaseCommand_SUCCESS); err != nil {
		cons.conn.Close()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return cons, nil
}

// openProducer connects l's producer on l.topic and waits until the broker has it ready; name
// is the producer's name the broker gave.
func (l load) openProducer() (prod *session, name string, err error) {
	prod, err = dial(l.ep, true)
	if err != nil {
		return nil, "", fmt.Errorf("producer: %w", err)
	}
	fail := func(err error) (*session, string, error) {
		prod.conn.Close()
		return nil, "", err
	}
	if err := prod.write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(l.topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1),
	}}, true); err != nil {
		return fail(err)
	}
	ps, err := prod.expect(pb.BaseCommand_PRODUCER_SUCCESS)
	if err != nil {
		return fail(fmt.Errorf("producer: %w", err))
	}
	for !ps.GetProducerSuccess().GetProducerReady() && ps.GetProducerSuccess().ProducerReady != nil {
		if ps, err = prod.expect(pb.BaseCommand_PRODUCER_SUCCESS); err != nil {
			return fail(err)
		}
	}
	return prod, ps.GetProducerSuccess().GetProducerName(), nil
}

// loadState is a load's run under way: its clock, and what its producer, receipt reader and
// consumer share.
type loadState struct {
	l                            load
	base, measureFrom, measureTo time.Time
	stop                         atomic.Bool // the producer is done
	sentTotal                    atomic.Int64
	errc                         chan error
	consumed                     chan loadResult // the consumer's count, once it ends
	window                       chan struct{}   // a slot per SEND in flight: receipts free them
}

// consume is the consumer: it grants permits, counts what arrives (count), acknowledges and
// grants again every half window, and ends after the measured interval with what it counted.
func (s *loadState) consume(cons *session) {
	var r loadResult
	if err := cons.write(flow(consumerPermits), true); err != nil {
		s.errc <- err
		return
	}
	var sinceFlow int
	var received int64
	// A consumer that stops receiving ends 10 s after the interval, with what it has.
	cons.conn.SetReadDeadline(s.measureTo.Add(10 * time.Second))
	for {
		f, err := cons.r.ReadFrame()
		if err != nil {
			if s.stop.Load() {
				s.consumed <- r
				return
			}
			s.errc <- fmt.Errorf("consumer read: %w", err)
			return
		}
		if t, _ := frame.PeekType(f.Command); t != pb.BaseCommand_MESSAGE {
			cmd, _ := frame.Decode(f.Command)
			cons.answerPing(cmd)
			continue
		}
		now := time.Now()
		if err := s.count(&r, f.Payload, now); err != nil {
			s.errc <- err
			return
		}
		sinceFlow++
		if sinceFlow >= consumerPermits/2 {
			ackAndFlow(cons, f.Command, sinceFlow)
			sinceFlow = 0
		}
		received++
		if s.consumerDone(now, received) {
			s.consumed <- r
			return
		}
	}
}

// count adds a message that arrived at now to r. Throughput counts arrivals inside the
// interval; latency, messages sent inside it (the payload starts with its send time).
func (s *loadState) count(r *loadResult, payload []byte, now time.Time) error {
	p, err := frame.ParsePayload(payload)
	if err != nil || len(p.Data) < 8 {
		return fmt.Errorf("consumer: bad payload: %v", err)
	}
	sent := s.base.Add(time.Duration(binary.BigEndian.Uint64(p.Data)))
	if !now.Before(s.measureFrom) && now.Before(s.measureTo) {
		r.Messages++
		r.Bytes += int64(len(p.Data))
	}
	if s.l.rate > 0 && !sent.Before(s.measureFrom) && sent.Before(s.measureTo) {
		r.Latencies = append(r.Latencies, now.Sub(sent))
	}
	return nil
}

// ackAndFlow acknowledges up to the MESSAGE command cmd, cumulatively, and grants n permits.
func ackAndFlow(cons *session, cmd []byte, n int) {
	c, _ := frame.Decode(cmd)
	cons.write(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Cumulative.Enum(),
		MessageId: []*pb.MessageIdData{c.GetMessage().GetMessageId()}}}, false)
	cons.write(flow(n), true)
}

// consumerDone: after the interval, at a fixed rate once every message sent has arrived
// (their latencies count); at full speed at once.
func (s *loadState) consumerDone(now time.Time, received int64) bool {
	return !now.Before(s.measureTo) && (s.l.rate == 0 || s.stop.Load() && received >= s.sentTotal.Load())
}

// readReceipts is the producer's reader: each SEND_RECEIPT frees a window slot.
func (s *loadState) readReceipts(prod *session) {
	for {
		cmd, err := prod.readCommand()
		if err != nil {
			if !s.stop.Load() {
				s.errc <- fmt.Errorf("producer read: %w", err)
			}
			return
		}
		switch cmd.GetType() {
		case pb.BaseCommand_SEND_RECEIPT:
			<-s.window
		case pb.BaseCommand_SEND_ERROR:
			s.errc <- fmt.Errorf("send error: %v", cmd.GetSendError())
			return
		default:
			prod.answerPing(cmd)
		}
	}
}

// produce sends until the measured interval ends, within the window, at l.rate if set,
// calling l.onMeasure as the interval starts and ends; then it flushes and marks the
// producer done.
func (s *loadState) produce(prod *session, name string) error {
	m := newSendFrame(name, s.l.size)
	var interval time.Duration
	if s.l.rate > 0 {
		interval = time.Duration(float64(time.Second) / s.l.rate)
	}
	next := s.base
	measuring := false
	for {
		now := time.Now()
		if !now.Before(s.measureTo) {
			break
		}
		if !measuring && !now.Before(s.measureFrom) {
			measuring = true
			if s.l.onMeasure != nil {
				s.l.onMeasure(true)
			}
		}
		select {
		case err := <-s.errc:
			return err
		default:
		}
		if interval > 0 {
			if d := next.Sub(now); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(interval)
		}
		if err := s.takeSlot(prod); err != nil {
			return err
		}
		if err := s.send(prod, m, interval > 0); err != nil {
			return err
		}
	}
	if s.l.onMeasure != nil {
		s.l.onMeasure(false)
	}
	prod.wmu.Lock()
	prod.w.Flush()
	prod.wmu.Unlock()
	s.stop.Store(true)
	return nil
}

// takeSlot takes a window slot for the next SEND; with none free it flushes what is written
// and waits for a receipt, 30 s at most.
func (s *loadState) takeSlot(prod *session) error {
	select {
	case s.window <- struct{}{}:
		return nil
	default:
	}
	prod.wmu.Lock()
	err := prod.w.Flush()
	prod.wmu.Unlock()
	if err != nil {
		return err
	}
	select {
	case s.window <- struct{}{}:
		return nil
	case err := <-s.errc:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("producer window stalled for 30 s")
	}
}

// sendFrame is the producer's SEND, reused from one message to the next.
type sendFrame struct {
	payload, buf []byte
	send         *pb.BaseCommand
	md           *pb.MessageMetadata
	seq          uint64
}

func newSendFrame(producerName string, size int) *sendFrame {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	return &sendFrame{payload: payload,
		send: &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), NumMessages: proto.Int32(1)}},
		md:   &pb.MessageMetadata{ProducerName: proto.String(producerName)}}
}

// send writes the next SEND, its payload stamped with the time since base; flushed at once
// when paced, or when few are in flight.
func (s *loadState) send(prod *session, m *sendFrame, paced bool) error {
	binary.BigEndian.PutUint64(m.payload, uint64(time.Since(s.base)))
	m.send.Send.SequenceId = proto.Uint64(m.seq)
	m.md.SequenceId = proto.Uint64(m.seq)
	m.md.PublishTime = proto.Uint64(uint64(time.Now().UnixMilli()))
	m.seq++
	s.sentTotal.Store(int64(m.seq))
	var err error
	m.buf, err = frame.AppendPayloadCommand(m.buf[:0], m.send, nil, m.md, m.payload)
	if err != nil {
		return err
	}
	prod.wmu.Lock()
	_, err = prod.w.Write(m.buf)
	if err == nil && (paced || len(s.window) < 4) {
		err = prod.w.Flush()
	}
	prod.wmu.Unlock()
	return err
}

// collect takes the consumer's count once the producer is done; a consumer stalled 30 s past
// the end is made to end, with what it has, by closing its socket.
func (s *loadState) collect(cons *session) (loadResult, error) {
	select {
	case r := <-s.consumed:
		return r, nil
	case err := <-s.errc:
		return loadResult{}, err
	case <-time.After(30 * time.Second):
		cons.conn.Close()
		select {
		case r := <-s.consumed:
			return r, nil
		case err := <-s.errc:
			return loadResult{}, err
		}
	}
}

func flow(n int) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(uint32(n))}}
}

// percentile of sorted durations, in milliseconds.
func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

// idleConns opens n sessions and keeps them open until close is called.
func idleConns(ep endpoint, n int, withTarget bool) (closeAll func(), err error) {
	conns := make([]*session, 0, n)
	closeAll = func() {
		for _, s := range conns {
			s.conn.Close()
		}
	}
	for range n {
		s, err := dial(ep, withTarget)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("after %d connections: %w", len(conns), err)
		}
		conns = append(conns, s)
	}
	return closeAll, nil
}
