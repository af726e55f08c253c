package mux

import (
	"bytes"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

type nopHandler struct{}

func (nopHandler) Deliver([]Frame) error { return nil }
func (nopHandler) Lost(Held)             {}

// sharedConn is a Conn over one end of a pipe; the test reads what it writes at the other,
// and answers there.
func sharedConn(t *testing.T) (*Conn, *testBroker) {
	p := NewPool(Config{Connector: &upstream.Connector{}, Linger: time.Minute, Logger: zerolog.Nop()})
	t.Cleanup(p.Close)
	proxySide, brokerSide := net.Pipe()
	t.Cleanup(func() { brokerSide.Close() })
	c := newConn(p, Key{Addr: "broker:6650"}, &upstream.Conn{Conn: proxySide, Reader: frame.NewReader(proxySide, 0), Connected: &pb.CommandConnected{}})
	p.mu.Lock()
	p.conns[c.key] = append(p.conns[c.key], c)
	p.mu.Unlock()
	return c, &testBroker{t: t, Reader: frame.NewReader(brokerSide, 0), conn: brokerSide}
}

// testBroker is the broker's end of a sharedConn.
type testBroker struct {
	t *testing.T
	*frame.Reader
	conn net.Conn
}

// next reads the next command the broker gets.
func (b *testBroker) next() *pb.BaseCommand {
	b.t.Helper()
	f, err := b.ReadFrame()
	if err != nil {
		b.t.Fatal(err)
	}
	return mustDecode(f.Command)
}

// answer writes a broker command to the proxy.
func (b *testBroker) answer(cmd *pb.BaseCommand) {
	b.t.Helper()
	if err := frame.WriteCommand(b.conn, cmd); err != nil {
		b.t.Fatal(err)
	}
}

// readyProducer creates producer own for mb, has the broker accept it, and waits until the
// connection has taken the answer in (mb's handler may not be told); it returns the id the
// broker knows the producer by.
func readyProducer(t *testing.T, c *Conn, b *testBroker, mb *Member, own uint64) (brokers uint64) {
	t.Helper()
	if err := mb.Send(producerCmd(own), nil); err != nil {
		t.Fatal(err)
	}
	p := b.next().GetProducer()
	b.answer(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
		RequestId: p.RequestId, ProducerName: proto.String("p")}})
	wait.Until(t, 5*time.Second, "the broker's PRODUCER_SUCCESS to be taken in", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.m.isPending(producerID, p.GetProducerId())
	})
	return p.GetProducerId()
}

func producerCmd(id uint64) []byte {
	b, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String("t"), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)}})
	return b
}

func sendCmd(producer, seq uint64) []byte {
	b, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(producer), SequenceId: proto.Uint64(seq)}})
	return b
}

// TestWritesTowardsBrokerAreFair: ten clients with a megabyte queued each (their bound) do
// not hold up another client's frame behind all of it: the writer takes the clients in
// turns, so the small frame goes out after about one frame of each busy client (plus the
// batch being written), where first-come-first-served would put it behind some 160; and
// the payloads arrive as they were sent.
func TestWritesTowardsBrokerAreFair(t *testing.T) {
	c, broker := sharedConn(t)
	const busyClients, frames = 10, 100
	big := bytes.Repeat([]byte{'b'}, 64<<10)
	c.mu.Lock()
	quiet := c.attach(nopHandler{})
	var busy []*Member
	for range busyClients {
		busy = append(busy, c.attach(nopHandler{}))
	}
	c.mu.Unlock()
	for _, mb := range busy {
		readyProducer(t, c, broker, mb, 1)
	}
	for _, mb := range busy {
		go func() {
			for seq := range uint64(frames) {
				if mb.Send(sendCmd(1, seq), big) != nil {
					return
				}
			}
		}()
	}
	// Let the busy clients fill their queues before the quiet one speaks.
	wait.Until(t, 10*time.Second, "the busy clients' queues to fill", func() bool {
		return queued(c, busy) >= busyClients*upQueueBytes
	})
	if err := quiet.Send(producerCmd(1), nil); err != nil { // queued at once: its queue is empty
		t.Fatal(err)
	}
	sends := 0
	for {
		f, err := broker.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := frame.Decode(f.Command)
		if err != nil {
			t.Fatal(err)
		}
		switch cmd.GetType() {
		case pb.BaseCommand_SEND:
			sends++
			if !bytes.Equal(f.Payload, big) {
				t.Fatalf("payload changed on the way: %d bytes", len(f.Payload))
			}
			continue
		case pb.BaseCommand_PRODUCER:
			if cmd.GetProducer().GetProducerId() != uint64(busyClients+1) { // the quiet one's: attached first, allocated last
				continue
			}
		}
		t.Logf("the quiet client's frame went out after %d frames of 64 KiB from %d busy clients", sends, busyClients)
		if limit := busyClients + maxBatch/len(big) + busyClients; sends > limit {
			t.Fatalf("the quiet client waited behind %d frames, want at most %d", sends, limit)
		}
		return
	}
}

// chanHandler hands the frames delivered to a client to the test.
type chanHandler chan Frame

func (h chanHandler) Deliver(fs []Frame) error {
	for _, f := range fs {
		h <- f
	}
	return nil
}
func (chanHandler) Lost(Held) {}

// TestAnswerTakenInBeforeDelivery: the broker's answer to a creation is taken into the
// mapping (on the connection's reader) before the client can see it, so the command the
// client sends as soon as it has the answer finds the producer accepted, or, after a
// refusal, forgotten: it never races the answer to the broker.
func TestAnswerTakenInBeforeDelivery(t *testing.T) {
	c, broker := sharedConn(t)
	delivered := make(chanHandler, 1)
	c.mu.Lock()
	mb := c.attach(delivered)
	c.mu.Unlock()
	for own := range uint64(200) {
		if err := mb.Send(producerCmd(own), nil); err != nil {
			t.Fatal(err)
		}
		p := broker.next().GetProducer()
		refuse := own%3 == 0
		if refuse {
			broker.answer(frame.Error(p.GetRequestId(), pb.ServerError_ProducerBusy, "busy"))
		} else {
			broker.answer(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
				RequestId: p.RequestId, ProducerName: proto.String("p")}})
		}
		<-delivered
		err := mb.Send(sendCmd(own, 1), nil)
		switch {
		case refuse && !errors.Is(err, ErrUnknownID):
			t.Fatalf("SEND on refused producer %d: %v", own, err)
		case refuse:
		case err != nil:
			t.Fatalf("SEND on accepted producer %d: %v", own, err)
		default:
			if got := broker.next().GetSend().GetProducerId(); got != p.GetProducerId() {
				t.Fatalf("SEND went to producer %d, want %d", got, p.GetProducerId())
			}
		}
	}
}

// queued is what the members have queued towards the broker.
func queued(c *Conn, members []*Member) (n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, mb := range members {
		n += mb.upBytes
	}
	return n
}

// producingMember attaches a client that ignores what comes back, with its producer 1
// accepted by the broker.
func producingMember(t *testing.T, c *Conn, b *testBroker) *Member {
	c.mu.Lock()
	mb := c.attach(nopHandler{})
	c.mu.Unlock()
	readyProducer(t, c, b, mb, 1)
	return mb
}

// acceptedProducer creates producer own for c and has the broker accept it; it returns the
// producer's connection id.
func acceptedProducer(tb testing.TB, m *Mapper, c *Client, own uint64) uint64 {
	tb.Helper()
	out, err := m.UpBytes(c, producerCmd(own))
	if err != nil {
		tb.Fatal(err)
	}
	sent := mustDecode(out).GetProducer()
	ok, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
		RequestId: sent.RequestId, ProducerName: proto.String("p")}})
	if _, owner, err := m.DownBytes(ok); err != nil || owner != c {
		tb.Fatalf("PRODUCER_SUCCESS: %v", err)
	}
	return sent.GetProducerId()
}

func mustDecode(b []byte) *pb.BaseCommand {
	cmd, err := frame.Decode(b)
	if err != nil {
		panic(err)
	}
	return cmd
}

// A routed session moves a producer to its topic's new owner: ReleaseProducer closes it on
// the broker as the proxy's own request (its answer reaches no client), and the client's id
// is free at once, so a SEND for it is refused here and a new PRODUCER gets a new id.
func TestReleaseProducerClosesItOnTheBroker(t *testing.T) {
	c, broker := sharedConn(t)
	delivered := make(chan *pb.BaseCommand, 4)
	c.mu.Lock()
	mb := c.attach(recorder{delivered})
	c.mu.Unlock()
	readyProducer(t, c, broker, mb, 7)
	<-delivered // its PRODUCER_SUCCESS
	mb.ReleaseProducer(7)
	mb.ReleaseProducer(7) // twice, or an id it never had: nothing more is sent
	mb.ReleaseConsumer(8)
	closed := broker.next()
	cp := closed.GetCloseProducer()
	if closed.GetType() != pb.BaseCommand_CLOSE_PRODUCER || cp == nil {
		t.Fatalf("broker got %v, want CLOSE_PRODUCER", closed)
	}
	broker.answer(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: cp.RequestId}})
	if err := mb.Send(sendCmd(7, 1), []byte("x")); !errors.Is(err, ErrUnknownID) {
		t.Errorf("SEND for a released producer: %v, want ErrUnknownID", err)
	}
	if err := mb.Send(producerCmd(7), nil); err != nil {
		t.Fatal(err)
	}
	if again := broker.next().GetProducer(); again.GetProducerId() == cp.GetProducerId() {
		t.Errorf("the new PRODUCER reuses connection id %d", again.GetProducerId())
	}
	select {
	case d := <-delivered:
		t.Errorf("the client was sent %v (the answer to the proxy's own close)", d)
	case <-time.After(50 * time.Millisecond):
	}
}

// recorder is a handler that keeps what it is delivered.
type recorder struct{ got chan *pb.BaseCommand }

func (r recorder) Deliver(fs []Frame) error {
	for _, f := range fs {
		r.got <- mustDecode(f.Command())
	}
	return nil
}
func (recorder) Lost(Held) {}

// TestLargeFramesHandedOver: a large frame goes on in the buffer it was read into, both
// ways: the broker's large MESSAGEs reach the client in the buffer the connection's reader
// read them into (a small one is copied), intact and mapped back, and a client's large SEND
// given with its buffer (SendOwned) reaches the broker intact.
func TestLargeFramesHandedOver(t *testing.T) {
	c, broker := sharedConn(t)
	delivered := make(chanHandler, 8)
	c.mu.Lock()
	mb := c.attach(delivered)
	c.mu.Unlock()

	sub, _ := proto.Marshal(subscribing(7, 70))
	if err := mb.Send(sub, nil); err != nil {
		t.Fatal(err)
	}
	s := broker.next().GetSubscribe()
	broker.answer(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: s.RequestId}})
	if got := mustDecode((<-delivered).Command()); got.GetSuccess().GetRequestId() != 70 {
		t.Fatalf("the subscription's answer: %v", got)
	}
	sizes := []int{300 << 10, 100, 1 << 20}
	for i, n := range sizes {
		msg := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: s.ConsumerId,
			MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(uint64(i))}}}
		f, err := Encode(msg, bytes.Repeat([]byte{byte('a' + i)}, n))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (&net.Buffers{f.Head, f.Payload}).WriteTo(broker.conn); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range sizes {
		f := <-delivered
		if got := mustDecode(f.Command()).GetMessage(); got.GetConsumerId() != 7 || got.GetMessageId().GetEntryId() != uint64(i) {
			t.Errorf("message %d delivered as %v", i, got)
		}
		if !bytes.Equal(f.Payload, bytes.Repeat([]byte{byte('a' + i)}, n)) {
			t.Errorf("message %d: %d payload bytes, not as sent", i, len(f.Payload))
		}
		if handedOver := f.pay != nil; handedOver != (n > 64<<10) {
			t.Errorf("message %d of %d bytes: handed over in its read buffer: %v", i, n, handedOver)
		}
		f.Release()
	}

	readyProducer(t, c, broker, mb, 3)
	var bufs frame.Buffers
	pay := bufs.Get(1 << 20)
	for i := range pay.B {
		pay.B[i] = byte(i)
	}
	want := bytes.Clone(pay.B)
	if err := mb.SendOwned(sendCmd(3, 1), pay.B, pay); err != nil {
		t.Fatal(err)
	}
	f, err := broker.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Payload, want) {
		t.Errorf("the SEND reached the broker with %d payload bytes, not as sent", len(f.Payload))
	}
}

// events records what a handler is told, in order.
type events struct {
	mu   sync.Mutex
	seen []string
	told chan struct{}
}

func (e *events) add(ev string) {
	e.mu.Lock()
	e.seen = append(e.seen, ev)
	e.mu.Unlock()
	e.told <- struct{}{}
}

func (e *events) Deliver(fs []Frame) error {
	for _, f := range fs {
		e.add(mustDecode(f.Command()).GetType().String())
	}
	return nil
}

func (e *events) Lost(Held) { e.add("lost") }

// TestNoFrameAfterLost: a broker's MESSAGE read together with an AUTH_CHALLENGE whose
// credentials take a while, the connection's writer failing meanwhile: the client is told of
// the MESSAGE before the loss or not at all, never after it (it would name a consumer the
// loss closed, which the client may have made anew elsewhere).
func TestNoFrameAfterLost(t *testing.T) {
	fetching, release := make(chan struct{}), make(chan struct{})
	credentials := func() (string, []byte, error) {
		close(fetching)
		<-release
		return "token", []byte("x"), nil
	}
	p := NewPool(Config{Connector: &upstream.Connector{Credentials: credentials}, Linger: time.Minute, Logger: zerolog.Nop()})
	t.Cleanup(p.Close)
	proxySide, brokerSide := net.Pipe()
	c := newConn(p, Key{Addr: "broker:6650"}, &upstream.Conn{Conn: proxySide, Reader: frame.NewReader(proxySide, 0), Connected: &pb.CommandConnected{}})
	broker := &testBroker{t: t, Reader: frame.NewReader(brokerSide, 0), conn: brokerSide}
	h := &events{told: make(chan struct{}, 16)}
	c.mu.Lock()
	mb := c.attach(h)
	c.mu.Unlock()

	sub, _ := proto.Marshal(subscribing(7, 70))
	if err := mb.Send(sub, nil); err != nil {
		t.Fatal(err)
	}
	s := broker.next().GetSubscribe()
	broker.answer(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: s.RequestId}})
	<-h.told
	var read bytes.Buffer // one read brings both
	frame.WriteCommand(&read, &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: s.ConsumerId,
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1)}}})
	frame.WriteCommand(&read, &pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{}})
	if _, err := brokerSide.Write(read.Bytes()); err != nil {
		t.Fatal(err)
	}
	<-fetching
	brokerSide.Close()
	c.sendOwn(frame.Pong()) // the writer's write fails: the connection is lost
	wait.Until(t, 5*time.Second, "the loss", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Contains(h.seen, "lost")
	})
	close(release)
	time.Sleep(50 * time.Millisecond) // room for a late delivery to show
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.seen, "lost"); i != len(h.seen)-1 {
		t.Errorf("told %v: frames after the loss", h.seen)
	}
}
