package session

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// waitParked waits until n sockets are parked on the server's poller.
func waitParked(t *testing.T, srv *Server, n int, what string) {
	t.Helper()
	if !wait.Within(5*time.Second, func() bool { return srv.idle.Parked() == n }) {
		t.Fatalf("%s: %d sockets parked, want %d", what, srv.idle.Parked(), n)
	}
}

// An idle lookup session parks its client's socket (no goroutine waits for it), answers
// what comes after, parks again, and is drained from the park.
func TestIdleLookupSessionParks(t *testing.T) {
	cfg := testConfig()
	cfg.KeepAliveInterval = time.Minute // no keep-alive during the test: only the drain wakes it
	srv, addr, m := serveForDrain(t, cfg, answerLookups(), noTargets{})
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	p.recv() // CONNECTED
	waitParked(t, srv, 1, "after CONNECTED")
	for id := range uint64(3) {
		p.send(lookupCmd("persistent://acme/ns/t", id))
		if r := p.recv().GetLookupTopicResponse(); r.GetRequestId() != id || r.GetResponse() != pb.CommandLookupTopicResponse_Connect {
			t.Fatalf("lookup %d answered %v", id, r)
		}
		waitParked(t, srv, 1, "after a lookup")
	}
	stopped := shutdownIn(srv)
	p.expectClosed()
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := testutil.ToFloat64(m.closes.WithLabelValues(string(ReasonDrained))); got != 1 {
		t.Fatalf("drained closes = %v", got)
	}
}

// A direct session quiet for idleAfter parks both sockets; frames each way wake it and are
// forwarded, it parks again; the client's half-close, seen from the park, ends it as usual.
// Framed and passthrough forwarding alike.
func TestIdleDirectSessionParksAndResumes(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		t.Run(map[bool]string{false: "framed", true: "passthrough"}[passthrough], func(t *testing.T) {
			b, _, _ := fakeBroker(t)
			cfg := testConfig()
			cfg.Passthrough = passthrough
			srv, addr, m := serveForDrain(t, cfg, nil, oneTarget{b})
			p := dialPeer(t, addr)
			p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
			if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
				t.Fatalf("got %v", got)
			}
			waitParked(t, srv, 2, "after CONNECTED")
			for range 3 {
				p.send(frame.Ping()) // the fake broker echoes it
				if got := p.recv(); got.GetType() != pb.BaseCommand_PING {
					t.Fatalf("got %v, want the echoed PING", got)
				}
				waitParked(t, srv, 2, "after an exchange")
			}
			p.c.(*net.TCPConn).CloseWrite()
			p.expectClosed()
			waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
			waitParked(t, srv, 0, "after the end")
			if err := <-shutdownIn(srv); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
		})
	}
}

// A parked direct session is drained: woken, it closes both ends (drained) long before the
// drain deadline.
func TestParkedDirectSessionDrains(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		t.Run(map[bool]string{false: "framed", true: "passthrough"}[passthrough], func(t *testing.T) {
			b, _, _ := fakeBroker(t)
			cfg := testConfig()
			cfg.Passthrough = passthrough
			cfg.KeepAliveInterval = time.Minute // the drain, not a timer, must end it
			srv, addr, m := serveForDrain(t, cfg, nil, oneTarget{b})
			p := dialPeer(t, addr)
			p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
			p.recv()
			waitParked(t, srv, 2, "after CONNECTED")
			stopped := shutdownIn(srv)
			p.expectClosed()
			if err := <-stopped; err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if got := testutil.ToFloat64(m.closes.WithLabelValues(string(ReasonDrained))); got != 1 {
				t.Fatalf("drained closes = %v", got)
			}
		})
	}
}

// A parked direct session whose client is closed from the proxy's side (here the stall
// watchdog's path: session.close and the broker's wire closed) ends.
func TestParkedDirectSessionClosedFromOutside(t *testing.T) {
	b, _, _ := fakeBroker(t)
	cfg := testConfig()
	cfg.KeepAliveInterval = time.Minute
	srv, addr, m := serveForDrain(t, cfg, nil, oneTarget{b})
	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
	p.recv()
	waitParked(t, srv, 2, "after CONNECTED")
	srv.mu.Lock()
	for sess := range srv.sessions {
		sess.close(ReasonAuthExpired)
	}
	srv.mu.Unlock()
	p.expectClosed()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonAuthExpired)), 1)
	waitParked(t, srv, 0, "after the end")
	if err := <-shutdownIn(srv); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// A multiplexed session quiet for idleAfter parks its client's socket; a client's frames
// wake it and go through the shared connection, it parks again. The client's half-close,
// seen from the park, ends it; a drain ends a parked neighbour.
func TestIdleMultiplexedSessionParksAndResumes(t *testing.T) {
	_, target := newMuxBroker(t, 10)
	cfg, _ := muxConfig(t, 1<<20)
	srv, addr, m := serveForDrain(t, cfg, nil, oneTarget{target})
	p, neighbour := muxClient(t, addr, target), muxClient(t, addr, target)
	waitParked(t, srv, 2, "after CONNECTED")
	p.send(producerCmd("t", 1, 7))
	if got := p.recv().GetProducerSuccess(); got.GetRequestId() != 7 {
		t.Fatalf("producer answer %v", got)
	}
	for seq := range uint64(3) {
		waitParked(t, srv, 2, "after an exchange")
		p.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}})
		if r := p.recv().GetSendReceipt(); r.GetSequenceId() != seq {
			t.Fatalf("receipt %v, want sequence %d", r, seq)
		}
	}
	p.c.(*net.TCPConn).CloseWrite()
	p.expectClosed()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
	waitParked(t, srv, 1, "after the end")
	stopped := shutdownIn(srv)
	neighbour.expectClosed()
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	waitCounter(t, m.closes.WithLabelValues(string(ReasonDrained)), 1)
}

// onlySession is the server's one session.
func onlySession(t *testing.T, srv *Server) *session {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.sessions) != 1 {
		t.Fatalf("%d sessions, want 1", len(srv.sessions))
	}
	for s := range srv.sessions {
		return s
	}
	return nil
}

// parkedProducer is a multiplexed client with producer 1 on a proxy's one session, parked.
func parkedProducer(t *testing.T) (*Server, *peer, *muxBroker, *Metrics) {
	b, target := newMuxBroker(t, 10)
	cfg, _ := muxConfig(t, 1<<20)
	srv, addr, m := serveForDrain(t, cfg, nil, oneTarget{target})
	p := muxClient(t, addr, target)
	p.send(producerCmd("t", 1, 7))
	if got := p.recv().GetProducerSuccess(); got.GetRequestId() != 7 {
		t.Fatalf("producer answer %v", got)
	}
	waitParked(t, srv, 1, "after the producer")
	return srv, p, b, m
}

// A parked multiplexed session whose queue's write to the client fails (a client that reset
// its connection) ends: the writer's close of the socket wakes the park. Before, the socket
// left the poller with the close and the session, its broker connection's producer and its
// descriptor stayed until the proxy stopped.
func TestParkedMultiplexedSessionEndsWhenItsWriterFails(t *testing.T) {
	srv, p, b, m := parkedProducer(t)
	// The proxy's next write to the client fails (as after a reset), with no input to wake
	// the park; the lost broker connection gives the queue a CLOSE_PRODUCER to write.
	onlySession(t, srv).client.conn.(*net.TCPConn).CloseWrite()
	b.drop()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonIOError)), 1)
	waitParked(t, srv, 0, "after the end")
	p.c.Close() // the client's socket stays open (and reachable) until here
}

// A multiplexed client that stops in the middle of a frame (after a read that filled the
// reader's small buffer) is not parked while it stalls, its idle deadline passing more than
// once, and the frame's rest is read and answered when it comes.
func TestMultiplexedClientStalledMidFrame(t *testing.T) {
	srv, p, _, _ := parkedProducer(t)
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(9)}}
	meta := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(9), PublishTime: proto.Uint64(1)}
	big, err := frame.AppendPayloadCommand(nil, send, nil, meta, make([]byte, 1000))
	if err != nil {
		t.Fatal(err)
	}
	p.c.Write(big[:512])
	time.Sleep(3 * idleAfter) // the idle deadline passes in the middle of the frame
	if n := srv.idle.Parked(); n != 0 {
		t.Fatalf("%d sockets parked while a frame is half read", n)
	}
	p.c.Write(big[512:])
	if r := p.recv().GetSendReceipt(); r.GetSequenceId() != 9 {
		t.Fatalf("receipt %v, want sequence 9", r)
	}
	waitParked(t, srv, 1, "after the frame")
}

// A multiplexed client that sends after being parked for quietAfter (a quiet producer) is
// parked again as soon as its frame is handled, not after an idle deadline, and is served as
// before.
func TestQuietMultiplexedClientParkedAtOnce(t *testing.T) {
	srv, p, _, _ := parkedProducer(t)
	x := onlySession(t, srv).served.(*multiplexed)
	for seq := range uint64(2) {
		time.Sleep(quietAfter + idleAfter/2)
		p.send(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}})
		if r := p.recv().GetSendReceipt(); r.GetSequenceId() != seq {
			t.Fatalf("receipt %v, want sequence %d", r, seq)
		}
		waitParked(t, srv, 1, "after the quiet client's frame")
		if n := x.quietParks.Load(); n != seq+1 {
			t.Fatalf("after %d quiet sends: %d parked at once", seq+1, n)
		}
	}
}
