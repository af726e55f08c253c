// Package speaker is the far end of the proxy-bound benchmark: a small, fast stand-in for a
// Pulsar broker that answers at once, so that the path under test (a proxy) is the
// bottleneck, not the broker. It is a measuring instrument, not a broker: nothing is stored,
// compatibility with real clients is proven against real brokers (test/e2e).
//
//   - CONNECT is answered with CONNECTED, PING with PONG;
//   - PRODUCER with PRODUCER_SUCCESS, and every SEND at once with a SEND_RECEIPT (the receipts
//     of the SENDs one read brought in go out in one write);
//   - SUBSCRIBE with SUCCESS; FLOW grants permits, and the speaker sends MESSAGE frames
//     generated from memory while the consumer has permits (a batch takes as many permits as
//     it holds messages). The topic names the messages: Topic(ns, size, batch, n);
//   - CLOSE_PRODUCER and CLOSE_CONSUMER with SUCCESS (no MESSAGE of a closed consumer follows
//     it); ACK is read and dropped.
package speaker

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// IOSize is the most the speaker (and the benchmark's load generator) reads or writes at once:
// large enough that the far end costs fewer system calls per byte than a proxy between them.
const IOSize = 256 << 10

// Server is a running speaker.
type Server struct {
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[*conn]struct{}
	closed   bool
	payloads sync.Map // delivery{size, batch} -> []byte

	// Counters since the start, for tests and a benchmark's sanity checks.
	Received  atomic.Int64 // messages acknowledged with SEND_RECEIPT (a batch counts its messages)
	Delivered atomic.Int64 // messages sent in MESSAGE frames
}

type deliveryKey struct{ size, batch int }

// Listen starts a speaker on addr (e.g. "127.0.0.1:0").
func Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, conns: map[*conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the host:port the speaker listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Conns is the number of connections open now.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops accepting, closes every connection and waits for their goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.ln.Close()
	s.DropAll()
	s.wg.Wait()
}

// DropAll resets every open connection (SO_LINGER 0: no TIME_WAIT is left on either side,
// so a benchmark that opens and closes thousands of connections a round does not run out of
// ports).
func (s *Server) DropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if tc, ok := c.c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.c.Close()
	}
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var errno syscall.Errno
			if errors.As(err, &errno) && (errno == syscall.EMFILE || errno == syscall.ENFILE) {
				continue // out of descriptors for a moment: the client sees its dial fail or time out
			}
			continue
		}
		sc := &conn{s: s, c: c, consumers: map[uint64]*consumer{}}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go sc.serve()
	}
}

func (s *Server) payload(size, batch int) []byte {
	k := deliveryKey{size, batch}
	if p, ok := s.payloads.Load(k); ok {
		return p.([]byte)
	}
	p, _ := s.payloads.LoadOrStore(k, PayloadSection("speaker", size, batch))
	return p.([]byte)
}

// conn is one client (or proxy) connection.
type conn struct {
	s   *Server
	c   net.Conn
	out []byte // answers of the reader, written before its next read

	wmu sync.Mutex // serializes writes: the reader's answers and the consumers' deliveries

	mu        sync.Mutex // consumers and their permits
	consumers map[uint64]*consumer
	entry     uint64 // message ids of receipts
}

type consumer struct {
	id          uint64
	size, batch int
	permits     int64
	closed      bool
	cond        *sync.Cond
	done        chan struct{}
}

func (sc *conn) serve() {
	defer sc.s.wg.Done()
	defer func() {
		sc.c.Close()
		sc.mu.Lock()
		for _, cs := range sc.consumers {
			cs.closed = true
			cs.cond.Broadcast()
		}
		waits := make([]chan struct{}, 0, len(sc.consumers))
		for _, cs := range sc.consumers {
			waits = append(waits, cs.done)
		}
		sc.mu.Unlock()
		for _, w := range waits {
			<-w
		}
		sc.s.mu.Lock()
		delete(sc.s.conns, sc)
		sc.s.mu.Unlock()
	}()
	r := NewReader(sc.c, 4<<10, IOSize, sc.flush)
	for {
		cmd, _, err := r.Next()
		if err != nil {
			return
		}
		if err := sc.handle(cmd); err != nil {
			return
		}
	}
}

// flush writes the answers gathered since the last read.
func (sc *conn) flush() error {
	if len(sc.out) == 0 {
		return nil
	}
	sc.wmu.Lock()
	_, err := sc.c.Write(sc.out)
	sc.wmu.Unlock()
	sc.out = sc.out[:0]
	return err
}

func (sc *conn) answer(cmd *pb.BaseCommand) error {
	var err error
	sc.out, err = frame.AppendCommand(sc.out, cmd)
	return err
}

// handle answers one command; an error ends the connection. SEND, FLOW, ACK and keep-alives
// are read without decoding the command.
func (sc *conn) handle(cmd []byte) error {
	t, err := frame.PeekType(cmd)
	if err != nil {
		return err
	}
	switch t {
	case pb.BaseCommand_SEND:
		return sc.receipt(cmd)
	case pb.BaseCommand_FLOW:
		return sc.flow(cmd)
	case pb.BaseCommand_ACK, pb.BaseCommand_PONG:
		return nil
	case pb.BaseCommand_PING:
		return sc.answer(frame.Pong())
	}
	c, err := frame.Decode(cmd)
	if err != nil {
		return err
	}
	return sc.control(t, c)
}

// receipt answers a SEND at once with its SEND_RECEIPT.
func (sc *conn) receipt(cmd []byte) error {
	producer, seq, n, ok := Send(cmd)
	if !ok {
		return errors.New("speaker: bad SEND")
	}
	sc.entry++
	sc.out = AppendReceipt(sc.out, producer, seq, 1, sc.entry)
	sc.s.Received.Add(int64(n))
	return nil
}

// flow adds a FLOW's permits to its consumer, if the connection has it.
func (sc *conn) flow(cmd []byte) error {
	id, permits, ok := Flow(cmd)
	if !ok {
		return errors.New("speaker: bad FLOW")
	}
	sc.mu.Lock()
	if cs := sc.consumers[id]; cs != nil {
		cs.permits += int64(permits)
		cs.cond.Signal()
	}
	sc.mu.Unlock()
	return nil
}

// control answers a decoded command t: the handshake, producers and consumers; anything else
// a benchmark does not use is refused and the connection stays.
func (sc *conn) control(t pb.BaseCommand_Type, c *pb.BaseCommand) error {
	switch t {
	case pb.BaseCommand_CONNECT:
		v := min(c.GetConnect().GetProtocolVersion(), 21)
		return sc.answer(frame.Connected("pulsar-proxy-bench-speaker", v, MaxPayload))
	case pb.BaseCommand_PRODUCER:
		return sc.producer(c.GetProducer())
	case pb.BaseCommand_CLOSE_PRODUCER:
		return sc.answer(success(c.GetCloseProducer().GetRequestId()))
	case pb.BaseCommand_SUBSCRIBE:
		return sc.subscribe(c.GetSubscribe())
	case pb.BaseCommand_CLOSE_CONSUMER:
		return sc.closeConsumer(c.GetCloseConsumer())
	}
	if id, ok := frame.RequestID(c); ok {
		return sc.answer(frame.Error(id, pb.ServerError_NotAllowedError, "the benchmark speaker does not serve "+t.String()))
	}
	return nil
}

// producer accepts every producer at once, ready.
func (sc *conn) producer(p *pb.CommandProducer) error {
	name := p.GetProducerName()
	if name == "" {
		name = "speaker-producer"
	}
	return sc.answer(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
		RequestId: proto.Uint64(p.GetRequestId()), ProducerName: proto.String(name),
		LastSequenceId: proto.Int64(-1), ProducerReady: proto.Bool(true)}})
}

// subscribe makes a consumer that delivers what its topic names (see delivery) and starts its
// deliverer; a topic that names nothing or an id in use is refused.
func (sc *conn) subscribe(sub *pb.CommandSubscribe) error {
	size, batch, err := delivery(sub.GetTopic())
	if err != nil {
		return sc.answer(frame.Error(sub.GetRequestId(), pb.ServerError_InvalidTopicName, err.Error()))
	}
	sc.mu.Lock()
	if _, dup := sc.consumers[sub.GetConsumerId()]; dup {
		sc.mu.Unlock()
		return sc.answer(frame.Error(sub.GetRequestId(), pb.ServerError_ConsumerBusy, "consumer id in use"))
	}
	cs := &consumer{id: sub.GetConsumerId(), size: size, batch: batch, cond: sync.NewCond(&sc.mu), done: make(chan struct{})}
	sc.consumers[cs.id] = cs
	sc.mu.Unlock()
	go sc.deliver(cs)
	return sc.answer(success(sub.GetRequestId()))
}

// closeConsumer stops the consumer's deliverer, if there is one, before it answers.
func (sc *conn) closeConsumer(cc *pb.CommandCloseConsumer) error {
	sc.mu.Lock()
	cs := sc.consumers[cc.GetConsumerId()]
	delete(sc.consumers, cc.GetConsumerId())
	if cs != nil {
		cs.closed = true
		cs.cond.Broadcast()
	}
	sc.mu.Unlock()
	if cs != nil {
		<-cs.done // its last MESSAGE is written before the SUCCESS
	}
	return sc.answer(success(cc.GetRequestId()))
}

func success(requestID uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(requestID)}}
}

// deliver sends cs MESSAGE frames while it has permits: small frames gathered into writes of
// up to IOSize, large ones written header and shared payload together (writev).
func (sc *conn) deliver(cs *consumer) {
	defer close(cs.done)
	payload := sc.s.payload(cs.size, cs.batch)
	var hdr []byte
	perWrite := max(1, IOSize/(len(payload)+32))
	large := len(payload) >= 16<<10
	var entry uint64
	var bufs net.Buffers
	for {
		sc.mu.Lock()
		for cs.permits <= 0 && !cs.closed {
			cs.cond.Wait()
		}
		if cs.closed {
			sc.mu.Unlock()
			return
		}
		n := min(int((cs.permits+int64(cs.batch)-1)/int64(cs.batch)), perWrite)
		cs.permits -= int64(n * cs.batch)
		sc.mu.Unlock()

		hdr = hdr[:0]
		bufs = bufs[:0]
		for range n {
			entry++
			at := len(hdr)
			hdr = AppendMessage(hdr, cs.id, 2, entry, len(payload))
			if large {
				bufs = append(bufs, hdr[at:len(hdr):len(hdr)], payload)
			} else {
				hdr = append(hdr, payload...)
			}
		}
		sc.wmu.Lock()
		var err error
		if large {
			// hdr may have moved while it grew: take the headers from its final array.
			off := 0
			for i := 0; i < len(bufs); i += 2 {
				l := len(bufs[i])
				bufs[i] = hdr[off : off+l]
				off += l
			}
			w := bufs
			_, err = w.WriteTo(sc.c)
		} else {
			_, err = sc.c.Write(hdr)
		}
		sc.wmu.Unlock()
		if err != nil {
			sc.c.Close()
			return
		}
		sc.s.Delivered.Add(int64(n * cs.batch))
	}
}
