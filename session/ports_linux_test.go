package session

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/fakebroker"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/prereq"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// inNetns marks the copy of the test binary that runs inside its own network namespace.
const inNetns = "PULSAR_PROXY_TEST_IN_NETNS"

// The proxy dials every broker from one address, so towards one broker address it has one
// ephemeral port range of connections. When that runs out, the client whose session needs one
// more is told so at once (ServiceNotReady, which Pulsar clients retry) and the close is
// counted as broker_ports_exhausted; nothing hangs, and sessions go on once ports are free.
//
// The range is made small in a network namespace of the test's own (unshare -n; the port
// range is per namespace), so the host's is never touched: the test binary runs itself again
// there.
func TestBrokerPortsExhausted(t *testing.T) {
	if os.Getenv(inNetns) == "" {
		runInOwnNetns(t, "TestBrokerPortsExhausted", "40000 40009")
		return
	}
	b := fakebroker.Start(t, func(c net.Conn, cmd *pb.BaseCommand) {
		if cmd.GetType() == pb.BaseCommand_CONNECT {
			frame.WriteCommand(c, frame.Connected("fake-broker", 21, 5<<20))
		}
	})
	host, port, _ := net.SplitHostPort(b.Addr)
	addr, m := startProxy(t, testConfig(), nil, oneTarget{brokers.Broker{URL: "pulsar://" + b.Addr, Host: host, Port: port}})
	// Clients dial from ports of their own choosing, outside the range: only the proxy's
	// dials to the broker draw on it.
	clientPort := 50000
	open := func() *pb.BaseCommand {
		clientPort++
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: clientPort}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		p := &peer{t: t, c: c, r: frame.NewReader(c, frame.DefaultMaxFrameSize)}
		p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr) }))
		return p.recv()
	}
	sessions := 0
	var refused *pb.BaseCommand
	for range 20 { // ten ports in the range, some taken by the listeners
		got := open()
		if got.GetType() != pb.BaseCommand_CONNECTED {
			refused = got
			break
		}
		sessions++
	}
	if refused == nil || sessions == 0 {
		t.Fatalf("%d sessions opened, then %v; want some, then a refusal", sessions, refused)
	}
	if e := refused.GetError(); e.GetError() != pb.ServerError_ServiceNotReady || !strings.Contains(e.GetMessage(), "no local port left") {
		t.Fatalf("with the ports used up the client got %v, want ServiceNotReady saying no local port is left", refused)
	}
	waitCounter(t, m.closes.WithLabelValues(string(ReasonBrokerPorts)), 1)
	if n := testutil.ToFloat64(m.handshakeFailures.WithLabelValues(string(ReasonBrokerPorts))); n != 1 {
		t.Fatalf("handshake failures counted as %s: %v, want 1", ReasonBrokerPorts, n)
	}
	t.Logf("%d direct sessions to one broker address, then: %s", sessions, refused.GetError().GetMessage())

	// The broker lets go of its connections (closing first, so no port waits in TIME_WAIT on
	// the proxy's side): the ports are free again.
	b.DropConnections()
	var got *pb.BaseCommand
	if !wait.Within(10*time.Second, func() bool {
		got = open()
		return got.GetType() == pb.BaseCommand_CONNECTED
	}) {
		t.Fatalf("after the broker's connections closed, a new session still got %v", got)
	}
}

// runInOwnNetns runs the test named again, in a new network namespace whose loopback is up
// and whose ephemeral port range is ports ("low high"), and fails the test if it fails there.
func runInOwnNetns(t *testing.T, name, ports string) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err == nil {
		_, err = exec.LookPath("ip")
	}
	if err == nil && os.Geteuid() != 0 {
		err = os.ErrPermission
	}
	prereq.Need(t, "a network namespace of the test's own (root, unshare and ip)", err)
	script := `ip link set lo up && echo "$0" > /proc/sys/net/ipv4/ip_local_port_range && exec "$@"`
	cmd := exec.Command(unshare, "-n", "sh", "-c", script, ports, os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inNetns+"=1")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("in its own network namespace (ports %s):\n%s", ports, out)
	if err != nil {
		t.Fatalf("%s in its own network namespace: %v", name, err)
	}
}
