package e2efault

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// startProxy runs the proxy in front of both rig brokers (plus extraYAML) and stops it when
// the test ends, printing its log tail if the test failed.
func startProxy(t *testing.T, extraYAML string) *proxyproc.Proc {
	t.Helper()
	return startProxyFor(t, brokerURLs(), extraYAML)
}

func startProxyFor(t *testing.T, brokers []string, extraYAML string) *proxyproc.Proc {
	t.Helper()
	p, err := proxyproc.Start(proxyBinary, t.TempDir(), brokers, extraYAML)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProxy(t, p) })
	return p
}

func stopProxy(t *testing.T, p *proxyproc.Proc) {
	if !p.Stop() {
		t.Errorf("pulsar-proxy did not stop on SIGTERM")
	}
	if t.Failed() {
		t.Logf("proxy log tail:\n%s", p.LogTail(60))
	}
}

func brokerURLs() []string {
	var out []string
	for _, b := range theRig.Brokers {
		out = append(out, b.URL)
	}
	return out
}

// directURL is a service URL naming both brokers, as a client without a proxy is given.
func directURL() string {
	var hosts []string
	for _, b := range theRig.Brokers {
		hosts = append(hosts, strings.TrimPrefix(b.URL, "pulsar://"))
	}
	return "pulsar://" + strings.Join(hosts, ",")
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newClient creates a client with the tests' timeouts and no logging, closed when the test
// ends. keepAlive 0 keeps the client's default (30 s).
func newClient(t *testing.T, serviceURL string, keepAlive time.Duration) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: serviceURL, OperationTimeout: 60 * time.Second,
		ConnectionTimeout: 10 * time.Second, KeepAliveInterval: keepAlive, Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// placedTopic is a new topic whose bundle broker n owns.
func placedTopic(t *testing.T, prefix string, n int) string {
	t.Helper()
	topic := rig.UniqueTopic(t, prefix)
	if err := theRig.PlaceTopic(testCtx(t), topic, n); err != nil {
		t.Fatal(err)
	}
	return topic
}

// restartBrokerAtEnd starts broker n again when the test ends if it is not running, so the
// package's next test has both.
func restartBrokerAtEnd(t *testing.T, n int) {
	t.Cleanup(func() {
		theRig.SignalBroker(n, syscall.SIGCONT) // in case the test froze it and failed
		if theRig.SignalBroker(n, 0) == nil {
			return // still running
		}
		t0 := time.Now()
		if err := theRig.StartBroker(context.Background(), n); err != nil {
			t.Errorf("restarting broker %d: %v", n, err)
			return
		}
		t.Logf("broker %d restarted in %s", n, time.Since(t0).Round(100*time.Millisecond))
	})
}

// scrape reads the proxy's /metrics.
func scrape(t *testing.T, p *proxyproc.Proc) *metrics.Scrape {
	t.Helper()
	s, err := metrics.Fetch(p.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// count reads a labelled counter (0 while its series has not appeared).
func count(t *testing.T, p *proxyproc.Proc, name string, labels ...string) float64 {
	t.Helper()
	v, err := scrape(t, p).Count(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitCount waits until the counter reaches want (or two minutes pass) and returns its value.
func waitCount(t *testing.T, p *proxyproc.Proc, want float64, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	wait.Within(2*time.Minute, func() bool {
		v = count(t, p, name, labels...)
		return v >= want
	})
	return v
}

// procStatus reads a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// rawConnect opens a connection to addr and sends CONNECT (edit adjusts it); it returns the
// connection and a reader of the proxy's frames.
func rawConnect(t *testing.T, addr string, edit func(*pb.CommandConnect)) (net.Conn, *frame.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &pb.CommandConnect{ClientVersion: proto.String("e2efault"), ProtocolVersion: proto.Int32(21)}
	edit(c)
	if err := frame.WriteCommand(conn, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: c}); err != nil {
		t.Fatal(err)
	}
	return conn, frame.NewReader(conn, 0)
}

// readCommand reads the next command, answering the proxy's keep-alive PINGs.
func readCommand(conn net.Conn, r *frame.Reader) (*pb.BaseCommand, error) {
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return nil, err
		}
		cmd, err := frame.Decode(f.Command)
		if err != nil {
			return nil, err
		}
		if cmd.GetType() != pb.BaseCommand_PING {
			return cmd, nil
		}
		frame.WriteCommand(conn, frame.Pong())
	}
}

// connected opens a session and fails the test unless CONNECT is answered with CONNECTED.
// broker "" is a lookup-mode session, else a direct one to that broker URL.
func connected(t *testing.T, addr, broker string) (net.Conn, *frame.Reader) {
	t.Helper()
	conn, r := rawConnect(t, addr, func(c *pb.CommandConnect) {
		if broker != "" {
			c.ProxyToBrokerUrl = proto.String(broker)
		}
	})
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := readCommand(conn, r)
	if err != nil || resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT to %q answered %v, %v", broker, resp, err)
	}
	conn.SetReadDeadline(time.Time{})
	return conn, r
}

// label is a label matcher for metrics.Scrape: name="value".
func label(name, value string) string { return name + "=" + strconv.Quote(value) }
