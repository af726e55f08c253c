package mux

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

type nopHandler struct{}

func (nopHandler) Deliver(Frame) error { return nil }
func (nopHandler) Lost(Held)           {}

// sharedConn is a Conn over one end of a pipe; the test reads what it writes at the other.
func sharedConn(t *testing.T) (*Conn, *frame.Reader) {
	p := NewPool(Config{Connector: &upstream.Connector{}, Linger: time.Minute, Logger: zerolog.Nop()})
	t.Cleanup(p.Close)
	proxySide, brokerSide := net.Pipe()
	t.Cleanup(func() { brokerSide.Close() })
	c := newConn(p, Key{Addr: "broker:6650"}, &upstream.Conn{Conn: proxySide, Reader: frame.NewReader(proxySide, 0), Connected: &pb.CommandConnected{}})
	p.mu.Lock()
	p.conns[c.key] = append(p.conns[c.key], c)
	p.mu.Unlock()
	return c, frame.NewReader(brokerSide, 0)
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
		go func() {
			for seq := range uint64(frames) {
				if seq == 0 && mb.Send(producerCmd(1), nil) != nil {
					return
				}
				if mb.Send(sendCmd(1, seq), big) != nil {
					return
				}
			}
		}()
	}
	// Let the busy clients fill their queues before the quiet one speaks.
	deadline := time.Now().Add(10 * time.Second)
	for queued(c, busy) < busyClients*upQueueBytes {
		if time.Now().After(deadline) {
			t.Fatal("the busy clients' queues did not fill")
		}
		time.Sleep(time.Millisecond)
	}
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

// queued is what the members have queued towards the broker.
func queued(c *Conn, members []*Member) (n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, mb := range members {
		n += mb.upBytes
	}
	return n
}

func mustDecode(b []byte) *pb.BaseCommand {
	cmd, err := frame.Decode(b)
	if err != nil {
		panic(err)
	}
	return cmd
}
