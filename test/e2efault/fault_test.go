package e2efault

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

// fakeBroker listens on 127.0.0.1 and hands each connection to serve; it stops (closing the
// connections it holds) when the test ends.
func fakeBroker(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "pulsar://" + ln.Addr().String()
}

// TestBrokerPortThatNeverAnswers: a broker port that accepts TCP and reads, but never answers
// CONNECT. A client whose direct session targets it gets ServiceNotReady (which Pulsar clients
// retry with a fresh lookup) once broker.connectTimeout has passed, and the session is counted
// as broker_unreachable; the proxy's other sessions go on.
func TestBrokerPortThatNeverAnswers(t *testing.T) {
	silent := fakeBroker(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	const connectTimeout = 2 * time.Second
	proxy := startProxyFor(t, append(brokerURLs(), silent), "broker:\n  connectTimeout: 2s\n")

	began := time.Now()
	conn, r := rawConnect(t, proxy.Addr, func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(silent) })
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := readCommand(conn, r)
	took := time.Since(began)
	if err != nil {
		t.Fatalf("no answer to a CONNECT the broker never answers: %v", err)
	}
	e := resp.GetError()
	if e.GetError() != pb.ServerError_ServiceNotReady || !strings.Contains(e.GetMessage(), "CONNECT") {
		t.Fatalf("answer %v, want ServiceNotReady naming the unfinished CONNECT", resp)
	}
	if took < connectTimeout {
		t.Errorf("the error came after %s, before broker.connectTimeout (%s): not the timeout", took, connectTimeout)
	}
	if _, err := readCommand(conn, r); err == nil {
		t.Error("the session stayed open after the error")
	}
	t.Logf("RESULT broker port that never answers CONNECT: client got ServiceNotReady after %s (broker.connectTimeout %s): %q",
		took.Round(10*time.Millisecond), connectTimeout, e.GetMessage())
	if n := waitCount(t, proxy, 1, "pulsar_proxy_session_closes_total", label("reason", "broker_unreachable")); n != 1 {
		t.Errorf("broker_unreachable closes: %v, want 1", n)
	}
	// The proxy serves the real brokers meanwhile.
	l, _ := connected(t, proxy.Addr, theRig.BrokerURL(1))
	l.Close()
}

// garbage is bytes no Pulsar peer sends: a frame header announcing 2 GiB, then noise.
func garbage() []byte {
	b := binary.BigEndian.AppendUint32(nil, 0x7fffffff)
	return append(b, bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 64)...)
}

// TestGarbageAfterConnected: a peer that sends garbage once its session is up ends that
// session and no other, with the proxy forwarding unframed (passthrough, the default) and
// framed. From a client: a frame header announcing 2 GiB (framed, the proxy refuses it:
// bad_frame; unframed, the broker does and closes: broker_closed), and a well-framed command
// no broker can decode (the broker closes). From a broker, garbage after its CONNECTED
// (framed, the proxy refuses it; unframed, it reaches the client, which hangs up). Meanwhile a
// producer and a consumer through the same proxy to the same real broker lose nothing.
func TestGarbageAfterConnected(t *testing.T) {
	noisy := fakeBroker(t, func(c net.Conn) {
		r := frame.NewReader(c, 0)
		if _, err := r.ReadFrame(); err != nil {
			return
		}
		frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
			ServerVersion: proto.String("noisy"), ProtocolVersion: proto.Int32(21)}})
		time.Sleep(200 * time.Millisecond)
		c.Write(garbage())
		io.Copy(io.Discard, c)
		c.Close() // the proxy closed its side: so does this one
	})
	for _, passthrough := range []bool{true, false} {
		mode, tooBig, fromBroker := "passthrough", "broker_closed", "client_closed"
		if !passthrough {
			mode, tooBig, fromBroker = "framed", "bad_frame", "bad_frame"
		}
		t.Run(mode, func(t *testing.T) {
			proxy := startProxyFor(t, append(brokerURLs(), noisy), fmt.Sprintf("session:\n  passthrough: %v\n", passthrough))
			f := startFlow(t, "bystander", newClient(t, proxy.PulsarURL, 0), placedTopic(t, "garbage", 1), loadRate, 0)
			time.Sleep(2 * time.Second)
			began := time.Now()
			garbageSessions(t, proxy, []garbageCase{
				{"client sends a 2 GiB frame header", theRig.BrokerURL(1), tooBig, garbage()},
				{"client sends an undecodable command", theRig.BrokerURL(1), "broker_closed", undecodable()},
				{"broker sends garbage", noisy, fromBroker, nil},
			})
			if !waitRecovered([]*flow{f}, time.Now(), 30*time.Second) {
				t.Error("the bystander's flow stopped")
			}
			r := f.finish(t, began)
			t.Logf("bystander: %v", r)
			checkNoLoss(t, f, r)
			if r.failed > 0 {
				t.Errorf("the bystander had %d send errors", r.failed)
			}
		})
	}
}

type garbageCase struct {
	name, broker, reason string
	send                 []byte
}

// garbageSessions opens a session per case, sends its bytes and checks the session ends
// with the case's reason.
func garbageSessions(t *testing.T, proxy *proxyproc.Proc, cases []garbageCase) {
	t.Helper()
	for _, c := range cases {
		before := count(t, proxy, "pulsar_proxy_session_closes_total", label("reason", c.reason))
		conn, r := connected(t, proxy.Addr, c.broker)
		conn.Write(c.send)
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		err := untilClosed(r)
		if isTimeoutErr(err) {
			t.Errorf("%s: the session was not ended", c.name)
			continue
		}
		// The proxy closed (or garbage reached this client): it hangs up, as a Pulsar client does.
		conn.Close()
		if n := waitCount(t, proxy, before+1, "pulsar_proxy_session_closes_total", label("reason", c.reason)); n != before+1 {
			t.Errorf("%s: %s closes %v, want %v", c.name, c.reason, n, before+1)
		}
		t.Logf("RESULT garbage after CONNECTED, %s: that session ended (%s)", c.name, c.reason)
	}
}

// undecodable is a well-formed frame whose command bytes are not a BaseCommand.
func undecodable() []byte {
	cmd := bytes.Repeat([]byte{0xff}, 32)
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(cmd)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(cmd)))
	return append(b, cmd...)
}

// TestProxyKilledUnderLoad kills the proxy with SIGKILL while a producer and a consumer run
// through it, and starts it again on the same addresses: the clients reconnect and every
// acknowledged message arrives. The longest time without an acknowledgement is the outage as
// the clients saw it.
func TestProxyKilledUnderLoad(t *testing.T) {
	proxy := startProxy(t, "")
	f := startFlow(t, "through-proxy", newClient(t, proxy.PulsarURL, 0), placedTopic(t, "proxy-kill", 1), loadRate, 0)
	waitRunning(t, f)
	killed := time.Now()
	proxy.Kill()
	restarted, err := proxy.Restart()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProxy(t, restarted) })
	t.Logf("proxy restarted %s after the kill", time.Since(killed).Round(time.Millisecond))
	recovered := waitRecovered([]*flow{f}, killed, 90*time.Second)
	time.Sleep(afterRecovery)
	r := f.finish(t, killed)
	t.Logf("%v", r)
	t.Logf("RESULT proxy SIGKILL and restart: longest gap without an ack %s", r.ackGap.Round(10*time.Millisecond))
	checkNoLoss(t, f, r)
	if !recovered {
		t.Fatal("the clients did not recover within 90 s of the proxy's restart")
	}
}

// untilClosed reads frames until the connection ends and returns why it did.
func untilClosed(r *frame.Reader) error {
	for {
		if _, err := r.ReadFrame(); err != nil {
			return err
		}
	}
}
