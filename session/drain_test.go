package session

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// serveForDrain runs a server the test shuts down itself.
func serveForDrain(t *testing.T, cfg Config, r Resolver, targets Targets) (*Server, string, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	srv := NewServer(cfg, r, targets, m, zerolog.Nop())
	return srv, serveOn(t, srv, nil), m
}

// drainTestDeadline is the deadline the drain tests give Shutdown: three times the longest a
// draining session waits for its broker's side to settle (settleMax). A session that hands
// its client over by itself is done well within it; one that does not is closed at the
// deadline, and Shutdown then returns an error, which fails the test.
const drainTestDeadline = 3 * settleMax

// shutdownIn starts Shutdown with drainTestDeadline and reports how it ended.
func shutdownIn(srv *Server) <-chan error {
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), drainTestDeadline)
		defer cancel()
		res <- srv.Shutdown(ctx)
	}()
	return res
}

// A lookup in flight when draining starts is answered; then the connection closes, long
// before the drain deadline.
func TestDrainAnswersLookupsInFlightThenCloses(t *testing.T) {
	release := make(chan struct{})
	asked := make(chan struct{}, 1)
	r := fakeResolver(func(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
		asked <- struct{}{}
		<-release
		return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: proto.Uint64(1), Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://b:6650")}}, nil
	})
	srv, addr, m := serveForDrain(t, testConfig(), r, noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv()
	p.send(lookupCmd("persistent://public/default/t", 7))
	<-asked
	stopped := shutdownIn(srv)
	// the drain has begun before the answer is let go
	wait.Until(t, 10*time.Second, "the server to start draining", srv.Draining)
	close(release)
	if got := p.recv(); got.GetLookupTopicResponse().GetRequestId() != 7 {
		t.Fatalf("got %v, want the answer to the lookup in flight", got)
	}
	p.expectClosed()
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v, want every session handed over before the deadline", err)
	}
	if got := testutil.ToFloat64(m.closes.WithLabelValues(string(ReasonDrained))); got != 1 {
		t.Fatalf("drained closes = %v", got)
	}
}

// slowEchoBroker answers CONNECT, then echoes each frame after delay; it reports every frame
// it received.
func slowEchoBroker(t *testing.T, delay time.Duration) (brokers.Broker, <-chan *pb.BaseCommand) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *pb.BaseCommand, 16)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := frame.NewReader(c, frame.DefaultMaxFrameSize)
		if _, err := r.ReadFrame(); err != nil {
			return
		}
		frame.WriteCommand(c, frame.Connected("fake-broker", 21, 5<<20))
		for {
			f, err := r.ReadFrame()
			if err != nil {
				return
			}
			cmd, _ := frame.Decode(f.Command)
			got <- cmd
			time.Sleep(delay)
			if frame.WriteCommand(c, cmd) != nil {
				return
			}
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return brokers.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}, got
}

// On drain a direct session forwards nothing more from the client, delivers the broker's
// answer to what it already forwarded, then closes both ends by itself, before the deadline
// (Shutdown returns nil; see drainTestDeadline). Framed and passthrough forwarding alike.
func TestDrainDeliversBrokerAnswersThenCloses(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		t.Run(map[bool]string{false: "framed", true: "passthrough"}[passthrough], func(t *testing.T) {
			b, atBroker := slowEchoBroker(t, 100*time.Millisecond)
			cfg := testConfig()
			cfg.Passthrough = passthrough
			srv, addr, m := serveForDrain(t, cfg, nil, oneTarget{b})
			p := dialPeer(t, addr)
			p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
			if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
				t.Fatalf("got %v", got)
			}
			p.send(frame.Ping()) // a request the broker answers (this one echoes)
			<-atBroker           // forwarded; its answer is 100 ms away
			began := time.Now()
			stopped := shutdownIn(srv)
			wait.Until(t, 10*time.Second, "the server to start draining", srv.Draining) // then every session has been told
			p.send(frame.Ping())                                                        // after the drain began: must not reach the broker
			if got := p.recv(); got.GetType() != pb.BaseCommand_PING {
				t.Fatalf("got %v, want the broker's answer to the forwarded request", got)
			}
			p.expectClosed()
			select {
			case cmd := <-atBroker:
				t.Fatalf("%v sent after the drain began reached the broker", cmd.GetType())
			default:
			}
			if err := <-stopped; err != nil {
				t.Fatalf("Shutdown: %v: the session did not hand its client over by itself within %v", err, drainTestDeadline)
			}
			t.Logf("handed over in %v", time.Since(began).Round(time.Millisecond))
			if got := testutil.ToFloat64(m.closes.WithLabelValues(string(ReasonDrained))); got != 1 {
				t.Fatalf("drained closes = %v", got)
			}
		})
	}
}
