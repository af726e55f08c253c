package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// openFDs is how many descriptors process pid holds now.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("counting the proxy's descriptors: %v", err)
	}
	return len(ents)
}

// halfSentFlood opens n connections to addr, one after the other, and sends on each the start
// of a request that never ends (no blank line after the headers). Every 250 connections it
// closes its end of those the proxy has already closed, so that this process holds about as
// many as the proxy lets one client hold. It returns the connections still open; the caller
// closes them.
func halfSentFlood(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var open []net.Conn
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			closeAll(open)
			t.Fatalf("connection %d of the flood: %v", i, err)
		}
		open = append(open, c)
		fmt.Fprintf(c, "GET /admin/v2/clusters HTTP/1.1\r\nHost: proxy\r\nUser-Agent: half-sent-%d\r\n", i)
		if (i+1)%250 == 0 || i == n-1 {
			open = keepOpen(open)
		}
	}
	return open
}

// keepOpen closes (on this side) the connections the proxy has closed, its 503 read or not,
// and returns the others.
func keepOpen(conns []net.Conn) []net.Conn {
	kept := conns[:0]
	buf := make([]byte, 512)
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			kept = append(kept, c) // nothing from the proxy: it holds the connection
			continue
		}
		c.Close()
	}
	return kept
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// TestHTTPHalfSentFloodFromOneIP: 5,000 half-sent HTTP requests from one address, the attack
// that once took the proxy to 5,013 descriptors despite session.maxConnectionsPerIP 10 and, at
// the descriptor limit, cost the Pulsar listener its lookups. The proxy now holds about the
// per-IP cap of them (its descriptors, from /proc, stay near where they were), and a real
// client's lookup on the Pulsar port, from the same address, is served meanwhile.
func TestHTTPHalfSentFloodFromOneIP(t *testing.T) {
	const perIP, flood = 10, 5000
	p := startProxy(t, brokerURLs(), fmt.Sprintf("session:\n  maxConnectionsPerIP: %d\n", perIP))
	pid := p.PID()
	httpAddr := strings.TrimPrefix(p.HTTPURL, "http://")
	before := openFDs(t, pid)

	sampler := sampleProc(pid)
	conns := halfSentFlood(t, httpAddr, flood)
	defer func() { closeAll(conns) }()
	// The last connections may not have been accepted (and refused) yet: sweep for a while.
	wait.Within(10*time.Second, func() bool {
		if len(conns) > perIP {
			conns = keepOpen(conns)
		}
		return len(conns) <= perIP
	})
	peak, _ := sampler.stop()
	peak = max(peak, openFDs(t, pid))
	t.Logf("proxy descriptors: %d before the flood, %d at most during it; %d of the flood's connections held", before, peak, len(conns))
	// The slack covers what the proxy may open meanwhile for itself (a broker connection, a
	// splice pipe) and a connection being refused at the moment of a sample.
	if peak > before+perIP+16 {
		t.Errorf("the proxy went from %d to %d descriptors under %d half-sent requests from one address; want about session.maxConnectionsPerIP (%d) more",
			before, peak, flood, perIP)
	}
	if len(conns) > perIP {
		t.Errorf("%d of the flood's connections are still open at the proxy; want at most %d", len(conns), perIP)
	}

	// A real client's lookup (and the producer it is for) on the Pulsar port, from the same
	// address, while the flood's connections are held.
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: p.PulsarURL, OperationTimeout: 20 * time.Second,
		ConnectionTimeout: 10 * time.Second, Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "persistent://public/default/" + rig.UniqueName("http-flood")
	began := time.Now()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("lookup and producer during the HTTP flood (operation timeout 20 s): %v\n%s", err, p.LogTail(20))
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("during the flood")}); err != nil {
		t.Fatalf("send during the HTTP flood: %v", err)
	}
	t.Logf("lookup, producer and one message during the flood: %s", time.Since(began).Round(time.Millisecond))

	otherIPHealthz(t, httpAddr)
	closeAll(conns)
	conns = nil
	waitRefusals(t, p.HTTPURL, flood-perIP)
}

// otherIPHealthz asks /healthz from 127.0.0.2, another client than the flood's 127.0.0.1,
// where the system routes it to loopback (Linux does all of 127/8).
func otherIPHealthz(t *testing.T, addr string) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Logf("no request from another address: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Errorf("/healthz from another address during the flood: %q, %v", status, err)
	}
}

// waitRefusals waits (up to ten seconds, once the flood's connections are closed and the
// address may connect again) until the proxy's metrics count at least want refusals per IP on
// listen.http.
func waitRefusals(t *testing.T, httpURL string, want int) {
	t.Helper()
	const series = `pulsar_proxy_http_connections_refused_total{listener="http",reason="too_many_connections_per_ip"} `
	var last string
	if wait.Within(10*time.Second, func() bool {
		if body, ok := metricsText(httpURL); ok {
			for _, line := range strings.Split(body, "\n") {
				if v, ok := strings.CutPrefix(line, series); ok {
					last = v
					if n, _ := strconv.ParseFloat(v, 64); n >= float64(want) {
						return true
					}
				}
			}
		}
		return false
	}) {
		return
	}
	t.Errorf("the proxy counted %q refusals per IP on listen.http, want at least %d", last, want)
}

// metricsText is the proxy's /metrics, if it answers (a refused or reset request is retried
// by the caller).
func metricsText(httpURL string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpURL+"/metrics", nil)
	if err != nil {
		return "", false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err == nil && resp.StatusCode == http.StatusOK
}
