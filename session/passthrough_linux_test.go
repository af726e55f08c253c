package session

import (
	"bytes"
	"crypto/rand"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// A direct session without security forwards unframed when Passthrough is on: frames
// pipelined behind CONNECT and a large one arrive intact, bytes are counted, frames are not
// (nothing reads them), and a half-close reaches the broker.
func TestDirectModePassthrough(t *testing.T) {
	b, _, _ := fakeBroker(t)
	cfg := testConfig()
	cfg.Passthrough = true
	addr, m := startProxy(t, cfg, nil, oneTarget{b})
	p := dialPeer(t, addr)
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}
	payload := make([]byte, 2<<20)
	rand.Read(payload)
	big, err := frame.AppendPayloadCommand(nil, send, nil, md, payload)
	if err != nil {
		t.Fatal(err)
	}
	connect, err := frame.AppendCommand(nil, connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
	if err != nil {
		t.Fatal(err)
	}
	small, _ := frame.AppendCommand(nil, frame.Ping())
	if _, err := p.c.Write(append(append(connect, small...), big...)); err != nil {
		t.Fatal(err)
	}
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("client got %v, want CONNECTED", got)
	}
	// The fake broker echoes every frame.
	if got := p.recv(); got.GetType() != pb.BaseCommand_PING {
		t.Fatalf("first frame behind CONNECT came back as %v", got)
	}
	if f, err := p.r.ReadFrame(); err != nil || !bytes.HasSuffix(f.Payload, payload) {
		t.Fatalf("the 2 MiB frame behind it: err %v", err)
	}
	p.c.(*net.TCPConn).CloseWrite()
	p.expectClosed()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
	waitCounter(t, m.bytes.WithLabelValues(toBroker), float64(len(small)+len(big)))
	if f := testutil.ToFloat64(m.frames.WithLabelValues(toBroker)); f != 0 {
		t.Fatalf("%v frames counted on an unframed direction", f)
	}
}
