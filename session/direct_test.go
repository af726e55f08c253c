package session

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/frames"
)

// oneTarget allows exactly one broker.
type oneTarget struct{ b brokers.Broker }

func (o oneTarget) Allow(target string) (brokers.Broker, error) {
	host, port, err := brokers.ParseTarget(target)
	if err != nil || host != o.b.Host || port != o.b.Port {
		return brokers.Broker{}, brokers.ErrTargetNotAllowed
	}
	return o.b, nil
}

// fakeBroker accepts one connection, answers CONNECT, then echoes every frame back.
// It records the CONNECT it got. A unit-test stand-in only: the real proof runs on Pulsar.
func fakeBroker(t *testing.T) (brokers.Broker, <-chan *pb.CommandConnect, <-chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	connects := make(chan *pb.CommandConnect, 1)
	accepted := make(chan int, 10)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		accepted <- 1
		defer c.Close()
		r := frame.NewReader(c, frame.DefaultMaxFrameSize)
		f, err := r.ReadFrame()
		if err != nil {
			return
		}
		cmd, _ := frame.Decode(f.Command)
		connects <- cmd.GetConnect()
		frame.WriteCommand(c, frame.Connected("fake-broker", 21, 5<<20))
		// Echo raw frames until EOF, then half-close like a broker closing its side.
		for {
			f, err := r.ReadFrame()
			if err != nil {
				return
			}
			var raw []byte
			raw = append(raw, 0, 0, 0, 0, 0, 0, 0, 0)
			total := 4 + len(f.Command) + len(f.Payload)
			raw[0], raw[1], raw[2], raw[3] = byte(total>>24), byte(total>>16), byte(total>>8), byte(total)
			n := len(f.Command)
			raw[4], raw[5], raw[6], raw[7] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
			raw = append(append(raw, f.Command...), f.Payload...)
			if _, err := c.Write(raw); err != nil {
				return
			}
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return brokers.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}, connects, accepted
}

func TestDirectModeForwardsBothWays(t *testing.T) {
	b, connects, _ := fakeBroker(t)
	addr, m := startProxy(t, testConfig(), nil, oneTarget{b})
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) {
		c.ProxyToBrokerUrl = proto.String(b.Addr())
		c.FeatureFlags = &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)}
	}))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED || got.GetConnected().GetServerVersion() != "fake-broker" {
		t.Fatalf("client got %v, want the broker's CONNECTED", got)
	}
	bc := <-connects
	if bc.GetProxyVersion() != "pulsar-proxy/test" || bc.GetClientVersion() != "test-client" ||
		bc.OriginalPrincipal != nil || !bc.GetFeatureFlags().GetSupportsAuthRefresh() || bc.ProxyToBrokerUrl != nil {
		t.Fatalf("broker CONNECT = %v", bc)
	}

	// Small and large SEND frames (the large one exceeds the read buffer and is streamed).
	for _, size := range []int{10, 1000, 100 << 10, 1 << 20} {
		payload := make([]byte, size)
		rand.Read(payload)
		send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
			ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(size))}}
		md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(uint64(size)), PublishTime: proto.Uint64(1)}
		raw, err := frame.AppendPayloadCommand(nil, send, nil, md, payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.c.Write(raw); err != nil {
			t.Fatal(err)
		}
		echo := make([]byte, len(raw))
		if _, err := io.ReadFull(p.c, echo); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(echo, raw) {
			t.Fatalf("size %d: frame changed on the way through", size)
		}
	}
	// Client closes its write side: the broker sees EOF, closes, and the client sees EOF.
	p.c.(*net.TCPConn).CloseWrite()
	p.expectClosed()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
	waitCounter(t, m.frames.WithLabelValues(toBroker), 4)
	waitCounter(t, m.frames.WithLabelValues(toClient), 4)
}

func TestDirectModeRefusesUnknownTargetsWithoutDialling(t *testing.T) {
	b, _, accepted := fakeBroker(t)
	decoy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer decoy.Close()
	decoyHits := make(chan struct{}, 10)
	go func() {
		for {
			c, err := decoy.Accept()
			if err != nil {
				return
			}
			decoyHits <- struct{}{}
			c.Close()
		}
	}()
	addr, m := startProxy(t, testConfig(), nil, oneTarget{b})
	for _, target := range []string{"127.0.0.1:22", decoy.Addr().String(), "evil.example:" + b.Port, "127.0.0.2:" + b.Port, "not a target"} {
		p := dialPeer(t, addr)
		p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(target) }))
		resp := p.recv()
		if resp.GetType() != pb.BaseCommand_ERROR || resp.GetError().GetError() != pb.ServerError_ServiceNotReady {
			t.Fatalf("target %q: got %v, want ERROR ServiceNotReady", target, resp)
		}
		p.expectClosed()
	}
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonTargetNotAllowed)), 5)
	select {
	case <-decoyHits:
		t.Fatal("the proxy dialled a target discovery does not know")
	case <-accepted:
		t.Fatal("the proxy dialled the broker for a refused target")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestSlowClientSlowsBroker: a client that stops reading must stall the broker's writes
// instead of growing the proxy's buffers.
func TestSlowClientSlowsBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	written := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			written <- -1
			return
		}
		defer c.Close()
		r := frame.NewReader(c, frame.DefaultMaxFrameSize)
		if _, err := r.ReadFrame(); err != nil { // CONNECT
			written <- -1
			return
		}
		frame.WriteCommand(c, frame.Connected("fake-broker", 21, 5<<20))
		msg := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
			ConsumerId: proto.Uint64(1), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1)}}}
		raw, _ := frame.AppendPayloadCommand(nil, msg, nil, &pb.MessageMetadata{
			ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}, make([]byte, 1<<20))
		var total int64
		// Write until a write has been blocked for a while: that is backpressure. The
		// bound of 1 GiB only stops a proxy that buffers without limit.
		for total < 1<<30 {
			c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
			n, err := c.Write(raw)
			total += int64(n)
			if err != nil {
				break
			}
		}
		written <- total
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	b := brokers.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}
	addr, _ := startProxy(t, testConfig(), nil, oneTarget{b})
	p := dialPeer(t, addr)
	p.c.(*net.TCPConn).SetReadBuffer(64 << 10)
	p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
	p.recv() // CONNECTED; from here on the client reads nothing
	total := <-written
	// Kernel socket buffers on both hops absorb some megabytes; the proxy itself holds at
	// most its fixed buffers.
	if total < 0 || total >= 64<<20 {
		t.Fatalf("broker wrote %d MiB to a client that reads nothing; want it stalled well below 64 MiB", total>>20)
	}
	t.Logf("broker stalled after %d MiB", total>>20)
}

// A CONNECT larger than the small command buffer (a big token) grows the reader once; the
// frames the client sent right behind it still reach the broker intact. One larger than
// frame.DefaultMaxCommandSize is refused.
func TestLargeConnectThenPipelinedFrames(t *testing.T) {
	b, connects, _ := fakeBroker(t)
	addr, _ := startProxy(t, testConfig(), nil, oneTarget{b})
	p := dialPeer(t, addr)
	connect, err := frame.AppendCommand(nil, connectCmd(func(c *pb.CommandConnect) {
		c.ProxyToBrokerUrl = proto.String(b.Addr())
		c.AuthData = bytes.Repeat([]byte{'t'}, 20<<10)
	}))
	if err != nil {
		t.Fatal(err)
	}
	var sends []byte
	for i := range 5 {
		sends = append(sends, frames.Send(t, 3000*i, uint64(i))...)
	}
	if _, err := p.c.Write(append(connect, sends...)); err != nil {
		t.Fatal(err)
	}
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, want CONNECTED", got)
	}
	<-connects
	// The frame reader may have read past CONNECTED already.
	echo := append([]byte(nil), p.r.Buffered()...)
	rest := make([]byte, len(sends)-len(echo))
	_, err = io.ReadFull(p.c, rest)
	if echo = append(echo, rest...); err != nil || !bytes.Equal(echo, sends) {
		t.Fatalf("pipelined frames after a large CONNECT: err %v, equal %v", err, bytes.Equal(echo, sends))
	}

	q := dialPeer(t, addr)
	q.send(connectCmd(func(c *pb.CommandConnect) { c.AuthData = bytes.Repeat([]byte{'t'}, frame.DefaultMaxCommandSize) }))
	if got := q.recv(); got.GetType() != pb.BaseCommand_ERROR {
		t.Fatalf("oversized CONNECT: got %v, want ERROR", got)
	}
	q.expectClosed()
}
