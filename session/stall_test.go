package session

import (
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/frames"
)

func stallConfig() Config {
	cfg := testConfig()
	cfg.StallTimeout = 300 * time.Millisecond
	return cfg
}

func directPeer(t *testing.T, addr, broker string) *peer {
	t.Helper()
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(broker) }))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: %v", got)
	}
	return p
}

// A client that sends part of a frame and then nothing is closed after the stall timeout;
// one that is merely idle between frames is not.
func TestStalledClientIsClosed(t *testing.T) {
	b, _, _ := fakeBroker(t)
	other, _, _ := fakeBroker(t)
	addr, m := startProxy(t, stallConfig(), nil, targets{b, other})
	idle := directPeer(t, addr, other.Addr())
	p := directPeer(t, addr, b.Addr())
	frame := frames.Send(t, 1000, 1)
	p.c.Write(frame[:100])
	p.expectClosed()
	waitCounter(t, m.stalled.WithLabelValues(string(ReasonClientStalled)), 1)
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientStalled)), 1)
	// The idle session outlived several timeouts and still forwards.
	idle.c.Write(frame)
	if got := idle.recv(); got.GetSend().GetSequenceId() != 1 {
		t.Fatalf("idle session after the stall checks: %v", got)
	}
}

// A client that takes nothing while its broker sends is closed after the stall timeout,
// freeing the broker's side too.
func TestClientNotReadingIsClosed(t *testing.T) {
	b := floodingBroker(t)
	addr, m := startProxy(t, stallConfig(), nil, oneTarget{b})
	p := dialPeer(t, addr)
	p.c.(*net.TCPConn).SetReadBuffer(4 << 10)
	p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
	// It never reads: not even its CONNECTED.
	waitCounter(t, m.stalled.WithLabelValues(string(ReasonClientNotReading)), 1)
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientNotReading)), 1)
}

// targets allows the brokers listed.
type targets []brokers.Broker

func (ts targets) Allow(target string) (brokers.Broker, error) {
	for _, b := range ts {
		if _, err := (oneTarget{b}).Allow(target); err == nil {
			return b, nil
		}
	}
	return brokers.Broker{}, brokers.ErrTargetNotAllowed
}

// A lookup-mode client that keeps asking but never reads (not even its CONNECTED) is closed
// once an answer has waited a keep-alive interval, with the reason that says so; the proxy
// does not go on taking its requests.
func TestLookupClientNotReadingIsClosed(t *testing.T) {
	topics := make([]string, 2000) // answers of about 64 KiB fill the socket buffers fast
	for i := range topics {
		topics[i] = fmt.Sprintf("persistent://public/default/a-topic-with-a-long-name-%05d", i)
	}
	addr, m := startProxy(t, testConfig(), fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		return &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(), GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
			RequestId: proto.Uint64(cmd.GetGetTopicsOfNamespace().GetRequestId()), Topics: topics}}, nil
	}), nil)
	p := dialPeer(t, addr)
	p.c.(*net.TCPConn).SetReadBuffer(4 << 10)
	p.c.SetDeadline(time.Time{})
	p.send(connectCmd(nil))
	done := make(chan error, 1)
	go func() {
		for id := uint64(1); ; id++ {
			p.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			err := frame.WriteCommand(p.c, &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
				Namespace: proto.String("public/default"), RequestId: proto.Uint64(id)}})
			if err != nil {
				done <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientNotReading)), 1)
	if err := <-done; isTimeout(err) {
		t.Fatalf("the proxy stopped reading but kept the connection: %v", err)
	}
}
