// Command idlemem measures what an idle client connection costs the proxy, as an operator
// sees it when clients reconnect to a new replica: a fresh proxy process, n connections that
// CONNECT and stay (lookup mode, or direct mode to a broker that answers CONNECT and then
// idles, on a broker connection each or multiplexed over a few), or n WebSocket consumer sessions (the broker stand-in answers their lookups and
// SUBSCRIBE, then sends nothing), and the process's RSS growth and live heap (after a GC)
// per connection.
//
//	go run -C bench ./idlemem -n 1000,10000
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

func main() {
	counts := flag.String("n", "1000,10000", "connection counts, comma-separated")
	binary := flag.String("binary", "", "the proxy binary (default: build it)")
	flag.StringVar(&profileDir, "profiles", "", "write each run's heap profile and goroutine stacks here")
	flag.Parse()
	if err := run(*counts, *binary); err != nil {
		fmt.Fprintln(os.Stderr, "idlemem:", err)
		os.Exit(1)
	}
}

func run(counts, binary string) error {
	raiseFileLimit()
	dir, err := os.MkdirTemp("", "idlemem")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if binary == "" {
		if binary, err = proxyproc.Build(dir); err != nil {
			return err
		}
	}
	broker, err := idleBroker()
	if err != nil {
		return err
	}
	fmt.Println("| mode | connections | RSS growth KiB/conn | live heap KiB/conn | stacks KiB/conn | goroutines/conn |")
	fmt.Println("|---|--:|--:|--:|--:|--:|")
	for _, f := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		for _, mode := range []string{modeLookup, modeDirect, modeMultiplexed, modeWebSocket} {
			if mode != modeLookup && 2*n+200 > fileLimit() {
				// A direct or WebSocket session is two sockets in the proxy (and two here).
				fmt.Printf("| %s | %d | (skipped: needs %d descriptors, the limit is %d) | | | |\n", mode, n, 2*n+200, fileLimit())
				continue
			}
			m, err := measure(binary, filepath.Join(dir, fmt.Sprint(n, mode)), broker, n, mode)
			if err != nil {
				return err
			}
			per := func(v float64) float64 { return v / 1024 / float64(n) }
			fmt.Printf("| %s | %d | %.1f | %.1f | %.1f | %.2f |\n", mode, n, per(m.rss), per(m.heap), per(m.stack), m.goroutines/float64(n))
		}
	}
	return nil
}

// profileDir, when set, receives heap-<mode>-<n>.pb.gz and goroutines-<mode>-<n>.txt taken
// with the connections open: what holds the memory that is left.
var profileDir string

type cost struct{ rss, heap, stack, goroutines float64 }

// The kinds of idle connection measured.
const (
	modeLookup = "lookup"
	modeDirect = "direct"
	// modeMultiplexed: direct sessions sharing the proxy's few broker connections
	// (broker.multiplex).
	modeMultiplexed = "direct multiplexed"
	modeWebSocket   = "websocket consumer"
)

// measure starts a fresh proxy, reads its footprint, opens n idle connections, reads it again.
func measure(binary, dir, broker string, n int, mode string) (cost, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cost{}, err
	}
	pprof, err := freeAddr()
	if err != nil {
		return cost{}, err
	}
	// proxyproc passes no PULSAR_PROXY_* of this process on, only its Env.
	proxyproc.Env = []string{"PULSAR_PROXY_LISTEN_PPROF=" + pprof}
	config := "session:\n  keepAliveInterval: 10m\nlog:\n  level: info\n  sessionSummary: \"off\"\nwebsocket:\n  enabled: true\n  maxSessions: 100000\n"
	if mode == modeMultiplexed {
		config += "broker:\n  multiplex: true\n"
	}
	p, err := proxyproc.Start(binary, dir, []string{"pulsar://" + broker}, config)
	if err != nil {
		return cost{}, err
	}
	defer p.Stop()
	before, err := footprint(p, pprof)
	if err != nil {
		return cost{}, err
	}
	var conns []io.Closer
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := open(p, broker, mode, i)
		if err != nil {
			return cost{}, fmt.Errorf("connection %d: %w\n%s", i, err, p.LogTail(10))
		}
		conns = append(conns, c)
	}
	time.Sleep(2 * time.Second) // let the last sessions settle
	after, err := footprint(p, pprof)
	if err != nil {
		return cost{}, err
	}
	if profileDir != "" {
		if err := saveProfiles(pprof, fmt.Sprintf("%s-%d", strings.ReplaceAll(mode, " ", "-"), n)); err != nil {
			return cost{}, err
		}
	}
	return cost{after.rss - before.rss, after.heap - before.heap, after.stack - before.stack, after.goroutines - before.goroutines}, nil
}

// footprint is the process's RSS, and its live heap and goroutines after a forced GC.
func footprint(p *proxyproc.Proc, pprof string) (cost, error) {
	// A few GCs first: the live heap, and goroutine stacks shrunk to what an idle session
	// uses (a GC halves a stack that uses less than a quarter of it), as after minutes of
	// running.
	for range 3 {
		resp, err := http.Get("http://" + pprof + "/debug/pprof/heap?gc=1")
		if err != nil {
			return cost{}, err
		}
		resp.Body.Close()
	}
	var c cost
	c.heap, _ = scrape(p.HTTPURL, "go_memstats_heap_alloc_bytes")
	c.goroutines, _ = scrape(p.HTTPURL, "go_goroutines")
	c.stack, _ = scrape(p.HTTPURL, "go_memstats_stack_inuse_bytes")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			c.rss = kb * 1024
		}
	}
	return c, nil
}

// saveProfiles keeps the live heap's profile and the goroutines' stacks under profileDir.
func saveProfiles(pprof, name string) error {
	for file, path := range map[string]string{
		"heap-" + name + ".pb.gz":     "/debug/pprof/heap?gc=1",
		"goroutines-" + name + ".txt": "/debug/pprof/goroutine?debug=1",
	} {
		resp, err := http.Get("http://" + pprof + path)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(profileDir, file), body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func scrape(base, name string) (float64, error) {
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	// Uncompressed: a gzip writer the proxy keeps for the answer is a megabyte of live heap
	// that comes and goes between readings, a KiB per connection of noise at 1,000.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), name+" "); ok {
			return strconv.ParseFloat(rest, 64)
		}
	}
	return 0, fmt.Errorf("%s not in the scrape", name)
}

// connect opens one session that CONNECTs (to broker through the proxy when direct) and
// gets CONNECTED.
func connect(proxy, broker string, direct bool) (net.Conn, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, err
	}
	cc := &pb.CommandConnect{ClientVersion: proto.String("idlemem"), ProtocolVersion: proto.Int32(21)}
	if direct {
		cc.ProxyToBrokerUrl = proto.String(broker)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if err := frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: cc}); err != nil {
		c.Close()
		return nil, err
	}
	cmd, err := frame.NewReader(c, 0).ReadCommand()
	if err != nil || cmd.GetType() != pb.BaseCommand_CONNECTED {
		c.Close()
		return nil, fmt.Errorf("CONNECT answered %v, %v", cmd, err)
	}
	return c, nil
}

// idleBroker answers each CONNECT with CONNECTED and, for the WebSocket sessions, their
// partition metadata, lookups (itself) and SUBSCRIBE; then it reads until the connection ends.
func idleBroker() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	self := ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go idleServe(c, self)
		}
	}()
	return self, nil
}

func idleServe(c net.Conn, self string) {
	defer c.Close()
	r := frame.NewReader(c, 0)
	for {
		cmd, err := r.ReadCommand()
		if err != nil {
			return
		}
		var resp *pb.BaseCommand
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			resp = frame.Connected("idle-broker", 21, 5<<20)
		case pb.BaseCommand_PARTITIONED_METADATA:
			resp = &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
				RequestId: cmd.PartitionMetadata.RequestId, Partitions: proto.Uint32(0)}}
		case pb.BaseCommand_LOOKUP:
			resp = &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
				RequestId: cmd.LookupTopic.RequestId, Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://" + self)}}
		case pb.BaseCommand_SUBSCRIBE:
			resp = &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: cmd.Subscribe.RequestId}}
		case pb.BaseCommand_PING:
			resp = frame.Pong()
		}
		if resp != nil {
			frame.WriteCommand(c, resp)
		}
	}
}

// open opens connection i of a mode.
func open(p *proxyproc.Proc, broker, mode string, i int) (io.Closer, error) {
	if mode != modeWebSocket {
		return connect(p.Addr, broker, mode != modeLookup)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := fmt.Sprintf("ws%s/ws/v2/consumer/persistent/public/default/idle/s-%d", strings.TrimPrefix(p.HTTPURL, "http"), i)
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	return closer{c}, nil
}

type closer struct{ c *websocket.Conn }

func (c closer) Close() error { return c.c.CloseNow() }

// raiseFileLimit lifts the descriptor limit (the proxy inherits it): 10,000 direct sessions
// are 20,000 sockets in each process. Root may raise the hard limit too.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return
	}
	want := syscall.Rlimit{Cur: 1 << 18, Max: max(l.Max, 1<<18)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func fileLimit() int {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 1024
	}
	return int(l.Cur)
}

// freeAddr is a loopback address free a moment ago, for the pprof listener (a measuring
// tool may take that race; the startup line does not name the pprof address).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
