package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeResolver answers every request from a function.
type fakeResolver func(cmd *pb.BaseCommand) (*pb.BaseCommand, error)

func (f fakeResolver) Resolve(_ context.Context, _ upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	return f(cmd)
}

func testConfig() Config {
	return Config{
		ServerVersion: "pulsar-proxy/test", ProtocolVersion: 21, MaxFrameSize: frame.DefaultMaxFrameSize,
		MaxMessageSize: 5 << 20, HandshakeTimeout: 2 * time.Second, KeepAliveInterval: 2 * time.Second,
		MaxPendingLookups: 4, Upstream: &upstream.Connector{Dialer: &upstream.Dialer{Timeout: time.Second},
			Version: "pulsar-proxy/test", ProtocolVersion: 21, Timeout: 2 * time.Second, MaxFrameSize: frame.DefaultMaxFrameSize},
		SummaryLevel: zerolog.Disabled,
	}
}

// startProxy runs a session server on loopback and stops it when the test ends.
func startProxy(t testing.TB, cfg Config, r Resolver, targets Targets) (addr string, m *Metrics) {
	t.Helper()
	m = NewMetrics(prometheus.NewRegistry())
	return serveOn(t, NewServer(cfg, r, targets, m, zerolog.Nop()), nil), m
}

// serveOn serves srv on a loopback listener (wrapped by wrap, when not nil) and shuts it
// down when the test ends; it returns the listener's address.
func serveOn(t testing.TB, srv *Server, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return addr
}

// peer is one end speaking frames, for tests.
type peer struct {
	t *testing.T
	c net.Conn
	r *frame.Reader
}

func dialPeer(t *testing.T, addr string) *peer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &peer{t: t, c: c, r: frame.NewReader(c, frame.DefaultMaxFrameSize)}
}

// send writes cmd as a client does: a SEND with its payload section (a message's metadata and
// an empty body), every other command alone.
func (p *peer) send(cmd *pb.BaseCommand) {
	p.t.Helper()
	if s := cmd.GetSend(); s != nil && cmd.GetType() == pb.BaseCommand_SEND {
		b, err := frame.AppendPayloadCommand(nil, cmd, nil, &pb.MessageMetadata{
			ProducerName: proto.String("p"), SequenceId: proto.Uint64(s.GetSequenceId()), PublishTime: proto.Uint64(1)}, nil)
		if err == nil {
			_, err = p.c.Write(b)
		}
		if err != nil {
			p.t.Fatal(err)
		}
		return
	}
	if err := frame.WriteCommand(p.c, cmd); err != nil {
		p.t.Fatal(err)
	}
}

func (p *peer) recv() *pb.BaseCommand {
	p.t.Helper()
	f, err := p.r.ReadFrame()
	if err != nil {
		p.t.Fatalf("read frame: %v", err)
	}
	cmd, err := frame.Decode(f.Command)
	if err != nil {
		p.t.Fatal(err)
	}
	return cmd
}

// expectClosed checks the other end closed the connection.
func (p *peer) expectClosed() {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := p.r.ReadFrame()
	if err == nil || isTimeout(err) {
		p.t.Fatalf("connection still open (err=%v)", err)
	}
}

func connectCmd(mut func(*pb.CommandConnect)) *pb.BaseCommand {
	c := &pb.CommandConnect{ClientVersion: proto.String("test-client"), ProtocolVersion: proto.Int32(21)}
	if mut != nil {
		mut(c)
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: c}
}

func lookupCmd(topic string, id uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(id)}}
}

type noTargets struct{}

func (noTargets) Allow(target string) (brokers.Broker, error) {
	return brokers.Broker{}, brokers.ErrTargetNotAllowed
}

func TestForgedProxyFieldsAreRefused(t *testing.T) {
	addr, m := startProxy(t, testConfig(), nil, noTargets{})
	for name, mut := range map[string]func(*pb.CommandConnect){
		"proxy_version":        func(c *pb.CommandConnect) { c.ProxyVersion = proto.String("evil") },
		"original_principal":   func(c *pb.CommandConnect) { c.OriginalPrincipal = proto.String("admin") },
		"original_auth_data":   func(c *pb.CommandConnect) { c.OriginalAuthData = proto.String("x") },
		"original_auth_method": func(c *pb.CommandConnect) { c.OriginalAuthMethod = proto.String("token") },
	} {
		t.Run(name, func(t *testing.T) {
			p := dialPeer(t, addr)
			p.send(connectCmd(mut))
			resp := p.recv()
			if resp.GetType() != pb.BaseCommand_ERROR || resp.GetError().GetError() != pb.ServerError_NotAllowedError {
				t.Fatalf("got %v, want ERROR NotAllowedError", resp)
			}
			if !bytes.Contains([]byte(resp.GetError().GetMessage()), []byte(name)) {
				t.Errorf("message %q does not name %s", resp.GetError().GetMessage(), name)
			}
			p.expectClosed()
		})
	}
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonForgedProxyFields)), 4)
}

func TestLookupModeAnswersThroughResolver(t *testing.T) {
	var asked atomic.Int32
	r := fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		asked.Add(1)
		switch cmd.GetType() {
		case pb.BaseCommand_LOOKUP:
			if cmd.GetLookupTopic().GetTopic() == "persistent://public/default/missing" {
				return nil, &lookup.Error{Code: pb.ServerError_ServiceNotReady, Message: "no broker answered"}
			}
			return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
				RequestId: proto.Uint64(999), Response: pb.CommandLookupTopicResponse_Connect.Enum(),
				BrokerServiceUrl: proto.String("pulsar://127.0.0.1:6651"), Authoritative: proto.Bool(true)}}, nil
		case pb.BaseCommand_PARTITIONED_METADATA:
			return &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
				RequestId: proto.Uint64(5), Partitions: proto.Uint32(4)}}, nil
		}
		return nil, errors.New("unexpected")
	})
	addr, _ := startProxy(t, testConfig(), r, noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) { c.ProtocolVersion = proto.Int32(30) }))
	connected := p.recv()
	if connected.GetType() != pb.BaseCommand_CONNECTED || connected.GetConnected().GetProtocolVersion() != 21 ||
		connected.GetConnected().GetServerVersion() != "pulsar-proxy/test" {
		t.Fatalf("CONNECTED = %v", connected)
	}

	p.send(lookupCmd("persistent://public/default/t", 42))
	resp := p.recv().GetLookupTopicResponse()
	if resp.GetRequestId() != 42 || !resp.GetProxyThroughServiceUrl() || resp.GetBrokerServiceUrl() != "pulsar://127.0.0.1:6651" || !resp.GetAuthoritative() {
		t.Fatalf("lookup response = %v", resp)
	}

	p.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String("persistent://public/default/p"), RequestId: proto.Uint64(43)}})
	pm := p.recv().GetPartitionMetadataResponse()
	if pm.GetRequestId() != 43 || pm.GetPartitions() != 4 {
		t.Fatalf("partitioned metadata response = %v", pm)
	}

	p.send(lookupCmd("persistent://public/default/missing", 44))
	failed := p.recv().GetLookupTopicResponse()
	if failed.GetRequestId() != 44 || failed.GetResponse() != pb.CommandLookupTopicResponse_Failed || failed.GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("failed lookup response = %v", failed)
	}

	p.send(frame.Ping())
	if got := p.recv().GetType(); got != pb.BaseCommand_PONG {
		t.Fatalf("PING answered with %v", got)
	}

	// A producer on a lookup connection is refused by request id, and the session goes on.
	p.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String("persistent://public/default/t"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(45)}})
	e := p.recv().GetError()
	if e.GetRequestId() != 45 || e.GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("PRODUCER in lookup mode answered with %v", e)
	}
	p.send(lookupCmd("persistent://public/default/t", 46))
	if got := p.recv().GetLookupTopicResponse().GetRequestId(); got != 46 {
		t.Fatalf("lookup after refusal: request id %d", got)
	}
}

func TestIdleLookupClientIsPingedThenClosed(t *testing.T) {
	cfg := testConfig()
	cfg.KeepAliveInterval = 200 * time.Millisecond
	addr, m := startProxy(t, cfg, nil, noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv() // CONNECTED
	if got := p.recv().GetType(); got != pb.BaseCommand_PING {
		t.Fatalf("idle client got %v, want PING", got)
	}
	p.expectClosed() // no PONG sent
	waitCounter(t, m.closes.WithLabelValues(string(ReasonKeepAliveTimeout)), 1)
}

func TestBadBytesCloseOnlyThatConnection(t *testing.T) {
	cfg := testConfig()
	cfg.HandshakeTimeout = 300 * time.Millisecond
	addr, _ := startProxy(t, cfg, fakeResolver(func(*pb.BaseCommand) (*pb.BaseCommand, error) {
		return nil, &lookup.Error{Code: pb.ServerError_ServiceNotReady, Message: "x"}
	}), noTargets{})

	healthy := dialPeer(t, addr)
	healthy.send(connectCmd(nil))
	healthy.recv()

	header := func(total, cmdSize uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, total)
		return binary.BigEndian.AppendUint32(b, cmdSize)
	}
	// What the client is told: an ERROR where the bytes are there to say what is wrong with
	// them, then the close; nothing where there is nobody to tell (the client closed its side
	// mid-frame) or nothing came (a stalled header: the handshake timeout closes it).
	const answered, silent = true, false
	cases := map[string]struct {
		bytes []byte
		error bool
	}{
		"garbage":        {[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), answered},
		"huge totalSize": {header(0xFFFFFFFF, 4), answered},
		"zero totalSize": {header(0, 0), answered},
		"truncated":      {append(header(100, 96), 0x08, 0x02), silent},
		"bad protobuf":   {append(header(8, 4), 0xff, 0xff, 0xff, 0xff), answered},
		"stall":          {header(50, 46), silent},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := dialPeer(t, addr)
			p.c.Write(tc.bytes)
			if name == "truncated" {
				p.c.(*net.TCPConn).CloseWrite()
			}
			p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			f, err := p.r.ReadFrame()
			switch {
			case isTimeout(err):
				t.Fatal("proxy neither answered nor closed")
			case tc.error && err != nil:
				t.Fatalf("closed without telling the client why (%v), want an ERROR first", err)
			case !tc.error && err == nil:
				t.Fatalf("answered %x, want a close", f.Command)
			case tc.error:
				cmd, _ := frame.Decode(f.Command)
				if e := cmd.GetError(); e == nil || e.GetError() != pb.ServerError_NotAllowedError || !strings.Contains(e.GetMessage(), "frame") {
					t.Fatalf("got %v, want NotAllowedError saying what is wrong with the frame", cmd)
				}
				p.expectClosed()
			}
		})
	}
	healthy.send(frame.Ping())
	if got := healthy.recv().GetType(); got != pb.BaseCommand_PONG {
		t.Fatalf("healthy session broke: %v", got)
	}
}

func waitCounter(t *testing.T, c prometheus.Collector, want float64) {
	t.Helper()
	if !wait.Within(5*time.Second, func() bool { return testutil.ToFloat64(c) >= want }) {
		t.Fatalf("counter = %v, want %v", testutil.ToFloat64(c), want)
	}
}
