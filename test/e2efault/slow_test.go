package e2efault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// stallYAML gives the slow-client tests short timeouts: the stall watchdog's and the
// keep-alive's.
const stallYAML = "session:\n  stallTimeout: 5s\n  keepAliveInterval: 3s\n"

// TestStuckConsumerIsBounded: a real consumer with a receiver queue of 100,000 messages
// (permits for about 1 GB of 10 KiB messages) stops reading altogether (its process frozen
// with SIGSTOP) while 40 MiB are published to its topic. The proxy does not buffer for it: it
// stops reading from the broker once the client's socket is full, so the broker's socket
// fills and the broker slows its dispatch to one message per read (backpressure: how many it
// sent is reported), and the proxy's memory grows by no more than its buffers. After
// session.stallTimeout the session is closed as client_not_reading. A producer and consumer
// of another topic through the same proxy go on meanwhile; their send latency is reported.
func TestStuckConsumerIsBounded(t *testing.T) {
	proxy := startProxy(t, stallYAML)
	topic := placedTopic(t, "stuck", 1)
	child := startChildConsumer(t, proxy.PulsarURL, topic, 100000)
	bystander := newLatencyProbe(t, newClient(t, proxy.PulsarURL, 0), placedTopic(t, "bystander", 1))
	before := bystander.sample(t, 50)

	rssBefore, _ := procStatus(proxy.PID(), "VmRSS")
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	const msgSize, msgs = 10 << 10, 4096
	published := publish(t, newClient(t, proxy.PulsarURL, 0), topic, msgSize, msgs)
	during := bystander.sample(t, 50)
	// The proxy's RSS, sampled until the watchdog closes the session (at most two minutes).
	var rssPeak int64
	wait.Until(t, 2*time.Minute, "the stuck consumer's session to be closed as client_not_reading", func() bool {
		if rss, err := procStatus(proxy.PID(), "VmRSS"); err == nil {
			rssPeak = max(rssPeak, rss)
		}
		return count(t, proxy, "pulsar_proxy_stalled_sessions_total", label("reason", "client_not_reading")) >= 1
	})
	took := time.Since(stopped)
	stats, err := theRig.TopicStats(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	forwarded := count(t, proxy, "pulsar_proxy_bytes_total", label("direction", "broker_to_client"))
	t.Logf("RESULT stuck consumer (receiver queue 100000, frozen): %d of %d MiB published; the broker sent %d of %d messages (backpressure); proxy RSS %s before, peak %s (+%s); closed as client_not_reading %s after it stopped (stallTimeout 5s); bytes forwarded to clients in all %s",
		published*msgSize>>20, msgs*msgSize>>20, stats.MsgOutCounter, msgs, mib(rssBefore), mib(rssPeak), mib(rssPeak-rssBefore), took.Round(100*time.Millisecond), mib(int64(forwarded)))
	t.Logf("RESULT bystander send latency p50/p99: before %s/%s, while the consumer was stuck %s/%s",
		before.p(50), before.p(99), during.p(50), during.p(99))
	if n := waitCount(t, proxy, 1, "pulsar_proxy_session_closes_total", label("reason", "client_not_reading")); n < 1 {
		t.Errorf("client_not_reading closes: %v", n)
	}
}

// publish sends n messages of size bytes and returns how many were acknowledged.
func publish(t *testing.T, c pulsar.Client, topic string, size, n int) int {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	payload := make([]byte, size)
	var mu sync.Mutex
	acked := 0
	for i := 0; i < n; i++ {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err == nil {
				mu.Lock()
				acked++
				mu.Unlock()
			}
		})
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return acked
}

// latencyProbe times sends to a topic whose consumer reads as it should.
type latencyProbe struct {
	p    pulsar.Producer
	cons pulsar.Consumer
}

func newLatencyProbe(t *testing.T, c pulsar.Client, topic string) *latencyProbe {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &latencyProbe{p: p, cons: cons}
}

// latencies are sorted durations.
type latencies []time.Duration

func (l latencies) p(q int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, len(l)*q/100)].Round(100 * time.Microsecond)
}

// sample times n sends (each acknowledged, then received).
func (lp *latencyProbe) sample(t *testing.T, n int) latencies {
	t.Helper()
	var out latencies
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := lp.p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("probe")}); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(t0))
		m, err := lp.cons.Receive(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		lp.cons.Ack(m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// TestHalfFrameIsTimedOut: a producer that sends half a SEND frame and then nothing. With
// frames read (passthrough off) the proxy sees the frame is incomplete and closes the session
// after session.stallTimeout as client_stalled. With passthrough on, the default, the proxy
// does not read frames: the half frame goes to the broker, which closes the connection when
// its keep-alive ping goes unanswered (after two keepAliveIntervalSeconds: 10 s on the fault
// rig, 30 s by default), and the session ends as broker_closed.
func TestHalfFrameIsTimedOut(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		mode, counter, reason := "framed", "pulsar_proxy_stalled_sessions_total", "client_stalled"
		if passthrough {
			mode, counter, reason = "passthrough", "pulsar_proxy_session_closes_total", "broker_closed"
		}
		t.Run(mode, func(t *testing.T) {
			proxy := startProxy(t, stallYAML+fmt.Sprintf("  passthrough: %v\n", passthrough))
			conn, r := producerSession(t, proxy.Addr, placedTopic(t, "half", 1))
			send, err := frame.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
				ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0)}}, nil,
				&pb.MessageMetadata{ProducerName: proto.String("half"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))},
				make([]byte, 4096))
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			conn.Write(send[:len(send)/2])
			if n := waitCount(t, proxy, 1, counter, label("reason", reason)); n != 1 {
				t.Fatalf("%s: %v, want 1", reason, n)
			}
			took := time.Since(began)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if err := untilClosed(r); isTimeoutErr(err) {
				t.Fatal("the session is still open")
			}
			t.Logf("RESULT half a SEND frame, then nothing (%s): closed as %s %s later (stallTimeout 5s, the broker's keepAliveIntervalSeconds 10)",
				mode, reason, took.Round(100*time.Millisecond))
		})
	}
}

// producerSession opens a direct session to broker 1 through the proxy and registers
// producer 1 on topic.
func producerSession(t *testing.T, addr, topic string) (net.Conn, *frame.Reader) {
	t.Helper()
	conn, r := connected(t, addr, theRig.BrokerURL(1))
	frame.WriteCommand(conn, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if resp, err := readCommand(conn, r); err != nil || resp.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("PRODUCER answered %v, %v", resp, err)
	}
	return conn, r
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestClientThatNeverReads: clients that never read, not even their CONNECTED. A lookup-mode
// client that also sends nothing is pinged after keepAliveInterval and closed after a second
// one (keepalive_timeout). One that keeps sending PINGs whose PONGs it never takes is closed
// once an answer has waited keepAliveInterval (client_not_reading); on a direct session to a
// real broker, once the broker's PONGs have waited session.stallTimeout (client_not_reading,
// by the stall watchdog).
func TestClientThatNeverReads(t *testing.T) {
	proxy := startProxy(t, stallYAML)
	cases := []struct {
		name, broker string
		reasons      []string // any of these, each a timeout's
		flood        bool
	}{
		{"lookup mode, silent", "", []string{"keepalive_timeout"}, false},
		// Under CPU load this flood sometimes ends as keepalive_timeout: no command arrived
		// for two keep-alive intervals while the client's writes were blocked (reproduced
		// outside the rig under CPU load in 1 or 2 floods of 5; not explained yet).
		{"lookup mode, sending PINGs", "", []string{"client_not_reading", "keepalive_timeout"}, true},
		{"direct mode to a broker, sending PINGs", theRig.BrokerURL(1), []string{"client_not_reading"}, true},
	}
	for _, c := range cases {
		conn, _ := rawConnect(t, proxy.Addr, func(cc *pb.CommandConnect) {
			if c.broker != "" {
				cc.ProxyToBrokerUrl = proto.String(c.broker)
			}
		})
		conn.(*net.TCPConn).SetReadBuffer(4 << 10)
		began := time.Now()
		if c.flood {
			go floodPings(conn)
		}
		reason := sessionEndReason(t, proxy, conn.LocalAddr().String())
		if !slices.Contains(c.reasons, reason) {
			t.Fatalf("%s: the session ended as %q, want one of %v", c.name, reason, c.reasons)
		}
		t.Logf("RESULT client that never reads, %s: closed as %s %s later (keepAliveInterval 3s, stallTimeout 5s)",
			c.name, reason, time.Since(began).Round(100*time.Millisecond))
		conn.Close()
	}
}

// sessionEndReason waits (up to two minutes) for the proxy's summary of the session whose
// client is remote ("session ended", logged at info) and returns its reason; "" if none came.
// The session's own line, not a counter: another session ending meanwhile cannot be taken
// for it.
func sessionEndReason(t *testing.T, p *proxyproc.Proc, remote string) string {
	t.Helper()
	reason := ""
	wait.Within(2*time.Minute, func() bool {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			var e struct{ Message, Remote, Reason string }
			if json.Unmarshal(line, &e) == nil && e.Message == "session ended" && e.Remote == remote {
				reason = e.Reason
				return true
			}
		}
		return false
	})
	return reason
}

// floodPings writes PINGs until the connection fails.
func floodPings(conn net.Conn) {
	ping, _ := frame.AppendCommand(nil, frame.Ping())
	var burst []byte
	for range 1024 {
		burst = append(burst, ping...)
	}
	for {
		conn.SetWriteDeadline(time.Now().Add(time.Minute))
		if _, err := conn.Write(burst); err != nil {
			return
		}
	}
}
