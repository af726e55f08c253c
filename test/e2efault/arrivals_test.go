package e2efault

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// stormClients is how many clients the reconnect storm opens at once. The machine's hard
// limit on open files is 20,000 per process; the test process holds one descriptor per
// client and the proxy another, so 10,000 fit each with room to spare.
func stormClients() int { return envInt("E2EFAULT_STORM_CLIENTS", 10000) }

// stormTopics is how many distinct topics the storm's clients look up: clients after a proxy
// restart mostly look up the same few hot topics, whose lookups the proxy coalesces.
const stormTopics = 20

// TestReconnectStorm runs first in the package (this file's name sorts before the fault
// tests'): it measures the proxy on a rig that no broker kill or freeze has touched yet. After
// them, a restarted broker once hung creating the storm's topics, before the proxy under test
// had even started.
//
// TestReconnectStorm: stormClients clients connect to a fresh proxy all at once, as after a
// proxy restart, and each looks up one of stormTopics topics on the real brokers. All are
// served (a Connect answer naming a rig broker), none is refused, and identical lookups in
// flight are coalesced into one broker request (pulsar_proxy_lookups_coalesced_total). The
// time until the last client has its answer and the proxy's peak RSS are reported.
func TestReconnectStorm(t *testing.T) {
	n := stormClients()
	raiseFileLimit(t, n+1000)
	topics := make([]string, stormTopics)
	for i := range topics {
		topics[i] = rig.UniqueTopic(t, fmt.Sprintf("storm-%d", i))
		if err := theRig.CreateTopic(testCtx(t), topics[i]); err != nil {
			t.Fatal(err)
		}
	}
	proxy := startProxy(t, "")
	rssIdle, _ := procStatus(proxy.PID(), "VmRSS")

	var served, refused, failed atomic.Int64
	var firstErr sync.Once
	conns := make(chan net.Conn, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			conn, resp, err := stormClient(proxy.Addr, topics[i%len(topics)], uint64(i+1))
			if conn != nil {
				conns <- conn
			}
			switch lr := resp.GetLookupTopicResponse(); {
			case err != nil:
				failed.Add(1)
				firstErr.Do(func() { t.Errorf("client %d: %v", i, err) })
			case lr.GetResponse() == pb.CommandLookupTopicResponse_Connect && isRigBroker(lr.GetBrokerServiceUrl()):
				served.Add(1)
			default:
				refused.Add(1)
				firstErr.Do(func() { t.Errorf("client %d: answer %v", i, resp) })
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(began)
	close(conns)
	s := scrape(t, proxy)
	hwm, err := procStatus(proxy.PID(), "VmHWM")
	for c := range conns {
		c.Close()
	}
	open, err1 := s.Value("pulsar_proxy_sessions_active", label("mode", "lookup"))
	coalesced, err2 := s.Count("pulsar_proxy_lookups_coalesced_total", label("type", "LOOKUP"))
	toBrokers, err3 := s.Count("pulsar_proxy_broker_lookup_requests_total", label("type", "LOOKUP"))
	if err := errors.Join(err, err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	t.Logf("RESULT reconnect storm: %d clients at once, %d served, %d refused, %d failed, in %s; %v lookup sessions open at the end; LOOKUPs coalesced %v, sent to brokers %v; proxy RSS %s idle, peak %s",
		n, served.Load(), refused.Load(), failed.Load(), took.Round(10*time.Millisecond), open, coalesced, toBrokers, mib(rssIdle), mib(hwm))
	if served.Load() != int64(n) {
		t.Fatalf("%d of %d clients served", served.Load(), n)
	}
	if coalesced == 0 || toBrokers >= float64(n) {
		t.Errorf("lookups were not coalesced: %v coalesced, %v sent to brokers for %d clients", coalesced, toBrokers, n)
	}
}

// stormClient connects, sends CONNECT and a LOOKUP of topic, and returns the open
// connection with the answer.
func stormClient(addr, topic string, id uint64) (net.Conn, *pb.BaseCommand, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Minute)
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	connect := &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("storm"), ProtocolVersion: proto.Int32(21)}}
	lookup := &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(id)}}
	for _, cmd := range []*pb.BaseCommand{connect, lookup} {
		if err := frame.WriteCommand(conn, cmd); err != nil {
			return conn, nil, err
		}
	}
	for {
		cmd, err := readSmallCommand(conn)
		if err != nil {
			return conn, nil, err
		}
		if cmd.GetType() == pb.BaseCommand_LOOKUP_RESPONSE {
			return conn, cmd, nil
		}
	}
}

// readSmallCommand reads one frame without a buffered reader (10,000 of those would weigh on
// the test process) and decodes its command.
func readSmallCommand(r io.Reader) (*pb.BaseCommand, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	total, size := binary.BigEndian.Uint32(head[:4]), binary.BigEndian.Uint32(head[4:])
	if size > total-4 || total > 1<<20 {
		return nil, fmt.Errorf("bad frame header %x", head)
	}
	rest := make([]byte, total-4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, err
	}
	return frame.Decode(rest[:size])
}

func isRigBroker(u string) bool {
	_, ok := theRig.BrokerByURL(u)
	return ok
}

// raiseFileLimit raises this process's soft limit on open files to at least want, within the
// hard limit (which an unprivileged test cannot raise); the test fails when the hard limit is
// lower. The proxy, a Go program, raises its own soft limit to its hard limit at start.
func raiseFileLimit(t *testing.T, want int) {
	t.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Max < uint64(want) {
		t.Fatalf("the hard limit on open files is %d; the storm needs %d (set E2EFAULT_STORM_CLIENTS lower)", l.Max, want)
	}
	if l.Cur < uint64(want) {
		l.Cur = uint64(want)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("open files: soft limit %d, hard limit %d", l.Cur, l.Max)
}
