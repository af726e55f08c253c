package speaker

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The hand-written encoders produce what frame.Decode reads as the intended command, and the
// readers read back what they wrote.
func TestWireRoundTrip(t *testing.T) {
	payload := PayloadSection("p", 10, 3)
	for _, tc := range wireCases(payload) {
		t.Run(tc.name, func(t *testing.T) {
			f, err := frame.NewReader(bytes.NewReader(tc.frame), 0).ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			c, err := frame.Decode(f.Command)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c, f.Command)
			if f.Payload != nil && !bytes.Equal(f.Payload, payload) {
				t.Fatal("payload section differs")
			}
		})
	}
}

// wireCase is a frame an encoder wrote and the check of what it decodes to (the command, and
// the command's bytes for the wire readers).
type wireCase struct {
	name  string
	frame []byte
	check func(*testing.T, *pb.BaseCommand, []byte)
}

// wireCases are a frame of every encoder, those with a payload carrying payload.
func wireCases(payload []byte) []wireCase {
	return []wireCase{
		{"send", append(AppendSend(nil, 7, 300, 3, len(payload)), payload...), func(t *testing.T, c *pb.BaseCommand, cmd []byte) {
			s := c.GetSend()
			if c.GetType() != pb.BaseCommand_SEND || s.GetProducerId() != 7 || s.GetSequenceId() != 300 || s.GetNumMessages() != 3 {
				t.Fatalf("decoded %v", c)
			}
			p, q, n, ok := Send(cmd)
			if !ok || p != 7 || q != 300 || n != 3 {
				t.Fatalf("Send = %d %d %d %v", p, q, n, ok)
			}
		}},
		{"send of one message", append(AppendSend(nil, 1, 0, 1, len(payload)), payload...), func(t *testing.T, c *pb.BaseCommand, cmd []byte) {
			if _, _, n, ok := Send(cmd); !ok || n != 1 || c.GetSend().NumMessages != nil {
				t.Fatalf("num_messages: %v %d", c, n)
			}
		}},
		{"receipt", AppendReceipt(nil, 2, 1<<40, 1, 99), func(t *testing.T, c *pb.BaseCommand, cmd []byte) {
			r := c.GetSendReceipt()
			if r.GetProducerId() != 2 || r.GetSequenceId() != 1<<40 || r.GetMessageId().GetEntryId() != 99 {
				t.Fatalf("decoded %v", c)
			}
			if p, q, ok := Receipt(cmd); !ok || p != 2 || q != 1<<40 {
				t.Fatalf("Receipt = %d %d %v", p, q, ok)
			}
		}},
		{"message", append(AppendMessage(nil, 5, 1, 1234, len(payload)), payload...), func(t *testing.T, c *pb.BaseCommand, cmd []byte) {
			m := c.GetMessage()
			if m.GetConsumerId() != 5 || m.GetMessageId().GetLedgerId() != 1 || m.GetMessageId().GetEntryId() != 1234 {
				t.Fatalf("decoded %v", c)
			}
			if id, l, e, ok := Message(cmd); !ok || id != 5 || l != 1 || e != 1234 {
				t.Fatalf("Message = %d %d %d %v", id, l, e, ok)
			}
		}},
		{"flow", AppendFlow(nil, 3, 1000), func(t *testing.T, c *pb.BaseCommand, cmd []byte) {
			if c.GetFlow().GetConsumerId() != 3 || c.GetFlow().GetMessagePermits() != 1000 {
				t.Fatalf("decoded %v", c)
			}
			if id, n, ok := Flow(cmd); !ok || id != 3 || n != 1000 {
				t.Fatalf("Flow = %d %d %v", id, n, ok)
			}
		}},
		{"ack", AppendAck(nil, 3, 1, 77), func(t *testing.T, c *pb.BaseCommand, _ []byte) {
			a := c.GetAck()
			if a.GetConsumerId() != 3 || a.GetAckType() != pb.CommandAck_Cumulative || len(a.GetMessageId()) != 1 || a.GetMessageId()[0].GetEntryId() != 77 {
				t.Fatalf("decoded %v", c)
			}
		}},
	}
}

// A batch payload is what a client's batch builder writes: metadata with
// num_messages_in_batch, then size-prefixed SingleMessageMetadata entries each followed by
// its message; the checksum verifies.
func TestPayloadSectionBatch(t *testing.T) {
	p, err := frame.ParsePayload(PayloadSection("bench", 1024, 100))
	if err != nil {
		t.Fatal(err)
	}
	var md pb.MessageMetadata
	if err := proto.Unmarshal(p.Metadata, &md); err != nil {
		t.Fatal(err)
	}
	if md.GetNumMessagesInBatch() != 100 || md.GetProducerName() != "bench" || int(md.GetUncompressedSize()) != len(p.Data) {
		t.Fatalf("metadata %v", &md)
	}
	data, n := p.Data, 0
	for len(data) > 0 {
		size := binary.BigEndian.Uint32(data)
		var single pb.SingleMessageMetadata
		if err := proto.Unmarshal(data[4:4+size], &single); err != nil {
			t.Fatal(err)
		}
		data = data[4+size:]
		if single.GetPayloadSize() != 1024 || len(data) < 1024 {
			t.Fatalf("entry %d: %v, %d bytes left", n, &single, len(data))
		}
		data = data[1024:]
		n++
	}
	if n != 100 {
		t.Fatalf("%d entries, want 100", n)
	}
	one, err := frame.ParsePayload(PayloadSection("bench", 100, 1))
	if err != nil || len(one.Data) != 100 {
		t.Fatalf("unbatched: %v, %d bytes", err, len(one.Data))
	}
}

func TestDeliveryFromTopic(t *testing.T) {
	size, batch, err := delivery(Topic("public/bench", 1024, 100, 7))
	if err != nil || size != 1024 || batch != 100 {
		t.Fatalf("%d %d %v", size, batch, err)
	}
	for _, bad := range []string{"persistent://public/bench/t", "persistent://public/bench/m-1x0-1", "persistent://public/bench/m-9999999x100-1", "m-ax1-1"} {
		if _, _, err := delivery(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The reader skips payloads it never holds: a 1 MiB frame through a 4 KiB buffer.
func TestReaderSkipsPayloads(t *testing.T) {
	big := PayloadSection("p", 1<<20, 1)
	var stream []byte
	stream = append(AppendSend(stream, 1, 1, 1, len(big)), big...)
	stream = AppendFlow(stream, 9, 5)
	r := NewReader(bytes.NewReader(stream), 4<<10, 8<<10, nil)
	cmd, n, err := r.Next()
	if err != nil || n != len(big) {
		t.Fatalf("first: %d %v", n, err)
	}
	if _, q, _, ok := Send(cmd); !ok || q != 1 {
		t.Fatal("not the SEND")
	}
	cmd, _, err = r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if id, p, ok := Flow(cmd); !ok || id != 9 || p != 5 {
		t.Fatal("not the FLOW")
	}
	if len(r.buf) > 8<<10 {
		t.Fatalf("buffer grew to %d", len(r.buf))
	}
}

type client struct {
	t *testing.T
	c net.Conn
	r *Reader
}

func dialSpeaker(t *testing.T, s *Server) *client {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	cl := &client{t: t, c: c, r: NewReader(c, 4<<10, 64<<10, nil)}
	cl.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{ClientVersion: proto.String("t"), ProtocolVersion: proto.Int32(21)}})
	if got := cl.next(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT answered %v", got)
	}
	return cl
}

func (cl *client) send(cmd *pb.BaseCommand) {
	cl.t.Helper()
	if err := frame.WriteCommand(cl.c, cmd); err != nil {
		cl.t.Fatal(err)
	}
}

func (cl *client) write(b []byte) {
	cl.t.Helper()
	if _, err := cl.c.Write(b); err != nil {
		cl.t.Fatal(err)
	}
}

func (cl *client) nextRaw() ([]byte, int) {
	cl.t.Helper()
	cmd, n, err := cl.r.Next()
	if err != nil {
		cl.t.Fatal(err)
	}
	return cmd, n
}

func (cl *client) next() *pb.BaseCommand {
	cl.t.Helper()
	cmd, _ := cl.nextRaw()
	c, err := frame.Decode(cmd)
	if err != nil {
		cl.t.Fatal(err)
	}
	return c
}

// A producer: every SEND, batched or not, is answered with its receipt, in order.
func TestProducer(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl := dialSpeaker(t, s)
	cl.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String("persistent://public/bench/p"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(4)}})
	if ps := cl.next().GetProducerSuccess(); ps.GetRequestId() != 4 || !ps.GetProducerReady() {
		t.Fatalf("PRODUCER answered %v", ps)
	}
	batch := PayloadSection("p", 1024, 100)
	var out []byte
	for seq := range uint64(50) {
		out = append(AppendSend(out, 1, seq, 100, len(batch)), batch...)
	}
	cl.write(out)
	for seq := range uint64(50) {
		cmd, _ := cl.nextRaw()
		if p, q, ok := Receipt(cmd); !ok || p != 1 || q != seq {
			t.Fatalf("receipt %d: %d %d %v", seq, p, q, ok)
		}
	}
	if got := s.Received.Load(); got != 5000 {
		t.Fatalf("Received = %d, want 5000", got)
	}
	cl.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	if got := cl.next(); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("PING answered %v", got)
	}
}

// A consumer gets exactly as many messages as it has permits (a batch takes as many as it
// holds, and goes out while any are left), and none after CLOSE_CONSUMER's SUCCESS.
func TestConsumerRespectsPermits(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl := dialSpeaker(t, s)
	subscribe := func(id uint64, size, batch int) {
		cl.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(Topic("public/bench", size, batch, 1)), Subscription: proto.String("s"),
			SubType: pb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id)}})
		if got := cl.next(); got.GetSuccess().GetRequestId() != id {
			t.Fatalf("SUBSCRIBE answered %v", got)
		}
	}
	subscribe(1, 100, 1)
	cl.write(AppendFlow(nil, 1, 25))
	for i := range 25 {
		cmd, n := cl.nextRaw()
		if id, _, e, ok := Message(cmd); !ok || id != 1 || e != uint64(i+1) || n != len(PayloadSection("speaker", 100, 1)) {
			t.Fatalf("message %d: %d %d %v, payload %d", i, id, e, ok, n)
		}
	}
	// No 26th: a PING's PONG is the next frame.
	cl.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	time.Sleep(50 * time.Millisecond)
	if got := cl.next(); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("after the permits ran out: %v", got)
	}

	// Batches of 10: 25 permits are three batches.
	subscribe(2, 64, 10)
	cl.write(AppendFlow(nil, 2, 25))
	for range 3 {
		if id, _, _, ok := Message(first(cl.nextRaw())); !ok || id != 2 {
			t.Fatal("want a MESSAGE for consumer 2")
		}
	}
	// Plenty of permits, then a close: its SUCCESS ends the consumer's messages.
	cl.write(AppendFlow(nil, 2, 1_000_000))
	cl.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(2), RequestId: proto.Uint64(9)}})
	for {
		cmd, _ := cl.nextRaw()
		if t, _ := frame.PeekType(cmd); t == pb.BaseCommand_SUCCESS {
			break
		}
	}
	cl.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	if got := cl.next(); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("a message after the close's SUCCESS: %v", got)
	}
	if got := s.Delivered.Load(); got < 25+30 {
		t.Fatalf("Delivered = %d", got)
	}
}

func first(b []byte, _ int) []byte { return b }

// Close ends every connection and leaves no goroutine behind; DropAll resets them.
func TestCloseEndsConnections(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := dialSpeaker(t, s)
	cl.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(Topic("public/bench", 10, 1, 1)), Subscription: proto.String("s"),
		SubType: pb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
	cl.next()
	if s.Conns() != 1 {
		t.Fatalf("Conns = %d", s.Conns())
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs")
	}
	if _, _, err := cl.r.Next(); err == nil {
		t.Fatal("connection still open")
	}
}
