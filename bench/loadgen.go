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

func (l load) run() (loadResult, error) {
	var res loadResult
	cons, err := dial(l.ep, true)
	if err != nil {
		return res, fmt.Errorf("consumer: %w", err)
	}
	defer cons.conn.Close()
	if err := cons.write(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(l.topic), Subscription: proto.String("bench"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), InitialPosition: pb.CommandSubscribe_Latest.Enum(),
	}}, true); err != nil {
		return res, err
	}
	if _, err := cons.expect(pb.BaseCommand_SUCCESS); err != nil {
		return res, fmt.Errorf("subscribe: %w", err)
	}
	prod, err := dial(l.ep, true)
	if err != nil {
		return res, fmt.Errorf("producer: %w", err)
	}
	defer prod.conn.Close()
	if err := prod.write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(l.topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1),
	}}, true); err != nil {
		return res, err
	}
	ps, err := prod.expect(pb.BaseCommand_PRODUCER_SUCCESS)
	if err != nil {
		return res, fmt.Errorf("producer: %w", err)
	}
	for !ps.GetProducerSuccess().GetProducerReady() && ps.GetProducerSuccess().ProducerReady != nil {
		if ps, err = prod.expect(pb.BaseCommand_PRODUCER_SUCCESS); err != nil {
			return res, err
		}
	}
	name := ps.GetProducerSuccess().GetProducerName()

	base := time.Now()
	measureFrom := base.Add(l.warmup)
	measureTo := measureFrom.Add(l.measure)
	var stop atomic.Bool
	var sentTotal atomic.Int64
	errc := make(chan error, 3)

	// consumer
	consumed := make(chan loadResult, 1)
	go func() {
		var r loadResult
		if err := cons.write(flow(consumerPermits), true); err != nil {
			errc <- err
			return
		}
		var sinceFlow int
		var received int64
		// A consumer that stops receiving ends 10 s after the interval, with what it has.
		cons.conn.SetReadDeadline(measureTo.Add(10 * time.Second))
		for {
			f, err := cons.r.ReadFrame()
			if err != nil {
				if stop.Load() {
					consumed <- r
					return
				}
				errc <- fmt.Errorf("consumer read: %w", err)
				return
			}
			t, _ := frame.PeekType(f.Command)
			if t != pb.BaseCommand_MESSAGE {
				cmd, _ := frame.Decode(f.Command)
				if cons.answerPing(cmd) {
					continue
				}
				continue
			}
			now := time.Now()
			p, err := frame.ParsePayload(f.Payload)
			if err != nil || len(p.Data) < 8 {
				errc <- fmt.Errorf("consumer: bad payload: %v", err)
				return
			}
			// Throughput counts arrivals inside the interval; latency, messages sent inside it.
			sent := base.Add(time.Duration(binary.BigEndian.Uint64(p.Data)))
			if !now.Before(measureFrom) && now.Before(measureTo) {
				r.Messages++
				r.Bytes += int64(len(p.Data))
			}
			if l.rate > 0 && !sent.Before(measureFrom) && sent.Before(measureTo) {
				r.Latencies = append(r.Latencies, now.Sub(sent))
			}
			sinceFlow++
			if sinceFlow >= consumerPermits/2 {
				cmd, _ := frame.Decode(f.Command)
				cons.write(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
					ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Cumulative.Enum(),
					MessageId: []*pb.MessageIdData{cmd.GetMessage().GetMessageId()}}}, false)
				cons.write(flow(sinceFlow), true)
				sinceFlow = 0
			}
			// At a fixed rate, wait for every message sent (their latencies count); at full
			// speed the interval is over.
			received++
			if !now.Before(measureTo) && (l.rate == 0 || stop.Load() && received >= sentTotal.Load()) {
				consumed <- r
				return
			}
		}
	}()

	// producer: receipts free window slots
	window := make(chan struct{}, producerWindow)
	go func() {
		for {
			cmd, err := prod.readCommand()
			if err != nil {
				if !stop.Load() {
					errc <- fmt.Errorf("producer read: %w", err)
				}
				return
			}
			switch cmd.GetType() {
			case pb.BaseCommand_SEND_RECEIPT:
				<-window
			case pb.BaseCommand_SEND_ERROR:
				errc <- fmt.Errorf("send error: %v", cmd.GetSendError())
				return
			default:
				prod.answerPing(cmd)
			}
		}
	}()
	payload := make([]byte, l.size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	var frameBuf []byte
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), NumMessages: proto.Int32(1)}}
	md := &pb.MessageMetadata{ProducerName: proto.String(name)}
	var seq uint64
	var interval time.Duration
	if l.rate > 0 {
		interval = time.Duration(float64(time.Second) / l.rate)
	}
	next := base
	measuring := false
	for {
		now := time.Now()
		if !now.Before(measureTo) {
			break
		}
		if !measuring && !now.Before(measureFrom) {
			measuring = true
			if l.onMeasure != nil {
				l.onMeasure(true)
			}
		}
		select {
		case err := <-errc:
			return res, err
		default:
		}
		if interval > 0 {
			if d := next.Sub(now); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(interval)
		}
		select {
		case window <- struct{}{}:
		default:
			prod.wmu.Lock()
			err := prod.w.Flush()
			prod.wmu.Unlock()
			if err != nil {
				return res, err
			}
			select {
			case window <- struct{}{}:
			case err := <-errc:
				return res, err
			case <-time.After(30 * time.Second):
				return res, errors.New("producer window stalled for 30 s")
			}
		}
		binary.BigEndian.PutUint64(payload, uint64(time.Since(base)))
		send.Send.SequenceId = proto.Uint64(seq)
		md.SequenceId = proto.Uint64(seq)
		md.PublishTime = proto.Uint64(uint64(time.Now().UnixMilli()))
		seq++
		sentTotal.Store(int64(seq))
		frameBuf, err = frame.AppendPayloadCommand(frameBuf[:0], send, nil, md, payload)
		if err != nil {
			return res, err
		}
		prod.wmu.Lock()
		_, err = prod.w.Write(frameBuf)
		if err == nil && (interval > 0 || len(window) < 4) {
			err = prod.w.Flush()
		}
		prod.wmu.Unlock()
		if err != nil {
			return res, err
		}
	}
	if l.onMeasure != nil {
		l.onMeasure(false)
	}
	prod.wmu.Lock()
	prod.w.Flush()
	prod.wmu.Unlock()
	stop.Store(true)
	select {
	case r := <-consumed:
		res = r
	case err := <-errc:
		return res, err
	case <-time.After(30 * time.Second):
		// the consumer is stalled past the end: take what it has by closing its socket
		cons.conn.Close()
		select {
		case r := <-consumed:
			res = r
		case err := <-errc:
			return res, err
		}
	}
	res.Seconds = l.measure.Seconds()
	return res, nil
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
