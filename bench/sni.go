//go:build linux

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// The SNI section of the proxy-bound benchmark: TLS the proxy does not terminate, relayed by
// server name. Two paths in front of a TLS sink in this process (the "broker", certificate
// for localhost): pulsar-proxy's SNI listener (listen.pulsarSNI, the sink as its one
// discovered TLS broker) and HAProxy routing on req.ssl_sni with splice on. The figure is the
// proxy's CPU seconds per GB of payload, side by side; the TLS work of both ends lands on the
// load's CPU, never the proxy's.
const (
	pathPulsarProxySNI   = "pulsar-proxy-sni"
	pathHAProxySNISplice = "haproxy-sni-splice"
	sniName              = "localhost"
	sniChunk             = 64 << 10
	sniResultsName       = "proxy-bound-sni"
)

// sniRun is one measured interval of one path.
type sniRun struct {
	Path      string  `json:"path"`
	Direction string  `json:"direction"` // upload: client to broker; download: broker to client
	Conns     int     `json:"connections"`
	Round     int     `json:"round"`
	Bytes     int64   `json:"payloadBytes"`
	Seconds   float64 `json:"seconds"`
	CPUSec    float64 `json:"proxyCPUSeconds"`
	MBps      float64 `json:"payloadMBps"`
	CPUPerGB  float64 `json:"proxyCPUSecondsPerGB"`
}

// sniResults are the section's results file.
type sniResults struct {
	Date    string   `json:"date"`
	Pinning string   `json:"pinning"`
	Runs    []sniRun `json:"runs"`
}

// measureSNI runs the section and writes its results into outDir.
func measureSNI(ctx context.Context, cfg proxyConfig, dir, bin, outDir string) error {
	ca, err := certs.MakeCA(dir, "sni-bench")
	if err != nil {
		return err
	}
	sink, err := startSNISink(ca)
	if err != nil {
		return err
	}
	defer sink.Close()
	paths := map[string]func() (*path, error){
		pathPulsarProxySNI: func() (*path, error) {
			return pulsarProxySNIPath(dir, bin, sink.Addr().String(), ca.CertFile, cfg.ProxyCPU)
		},
		pathHAProxySNISplice: func() (*path, error) { return haproxySNIPath(dir, sink.Addr().String(), cfg.ProxyCPU) },
	}
	res := &sniResults{Date: time.Now().UTC().Format(time.RFC3339), Pinning: fmt.Sprintf("proxy on CPU %d, load and TLS sink on CPU %d", cfg.ProxyCPU, cfg.LoadCPU)}
	for round := range cfg.Rounds {
		for _, name := range rotate([]string{pathPulsarProxySNI, pathHAProxySNISplice}, round) {
			p, err := paths[name]()
			if err != nil {
				return err
			}
			runs, err := measureSNIPath(ctx, p, ca, sniConns(cfg), round, cfg.MeasureSec)
			p.stop()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			res.Runs = append(res.Runs, runs...)
		}
	}
	return writeSNIResults(res, outDir)
}

// sniConns are the connection counts of the section: 1 and 100 (and the mode's largest up to
// 1,000 in a full run).
func sniConns(cfg proxyConfig) []int {
	conns := []int{1, 100}
	if cfg.Mode != "quick" && cfg.MaxConns >= 1000 {
		conns = append(conns, 1000)
	}
	return conns
}

func rotate(s []string, by int) []string {
	by %= len(s)
	return append(append([]string(nil), s[by:]...), s[:by]...)
}

// measureSNIPath measures both directions at each connection count through p.
func measureSNIPath(ctx context.Context, p *path, ca *certs.CA, conns []int, round int, seconds float64) ([]sniRun, error) {
	var runs []sniRun
	for _, n := range conns {
		for _, dir := range []string{"upload", "download"} {
			if ctx.Err() != nil {
				return runs, ctx.Err()
			}
			r, err := sniInterval(p, ca, n, dir, time.Duration(seconds*float64(time.Second)))
			if err != nil {
				return runs, err
			}
			r.Round = round
			log("%s %s %d conns: %.0f MB/s, %.2f CPU s/GB", p.Name, dir, n, r.MBps, r.CPUPerGB)
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// sniInterval opens n TLS connections through p, moves payload one way for d after a
// warm-up of a fifth of it, and reads the proxy's CPU time across the measured part.
func sniInterval(p *path, ca *certs.CA, n int, direction string, d time.Duration) (sniRun, error) {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	conns := make([]*tls.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := tls.Dial("tcp", p.ep.addr, &tls.Config{ServerName: sniName, RootCAs: roots})
		if err != nil {
			return sniRun{}, err
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte(direction[:1])); err != nil {
			return sniRun{}, err
		}
	}
	var moved atomic.Int64
	var measuring atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { sniMove(c, direction, &moved, &measuring, stop) })
	}
	time.Sleep(d / 5)
	cpu0, err := cpuSeconds(p.pid)
	if err != nil {
		return sniRun{}, err
	}
	measuring.Store(true)
	began := time.Now()
	time.Sleep(d)
	measuring.Store(false)
	elapsed := time.Since(began).Seconds()
	cpu1, err := cpuSeconds(p.pid)
	close(stop)
	for _, c := range conns {
		c.SetDeadline(time.Now())
	}
	wg.Wait()
	r := sniRun{Path: p.Name, Direction: direction, Conns: n, Bytes: moved.Load(), Seconds: elapsed, CPUSec: cpu1 - cpu0}
	r.MBps = float64(r.Bytes) / elapsed / 1e6
	if r.Bytes > 0 {
		r.CPUPerGB = r.CPUSec / (float64(r.Bytes) / 1e9)
	}
	return r, err
}

// sniMove writes (upload) or reads (download) chunks until stop, counting what moved while
// measuring.
func sniMove(c *tls.Conn, direction string, moved *atomic.Int64, measuring *atomic.Bool, stop chan struct{}) {
	buf := make([]byte, sniChunk)
	for {
		select {
		case <-stop:
			return
		default:
		}
		var k int
		var err error
		if direction == "upload" {
			k, err = c.Write(buf)
		} else {
			k, err = c.Read(buf)
		}
		if measuring.Load() {
			moved.Add(int64(k))
		}
		if err != nil {
			return
		}
	}
}

// startSNISink is the TLS "broker": a connection's first byte says what it does, u(pload):
// read and discard, d(ownload): write chunks until the client goes.
func startSNISink(ca *certs.CA) (net.Listener, error) {
	pair, err := ca.MakeServer("sink", time.Now().Add(24*time.Hour), sniName)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sinkServe(c)
		}
	}()
	return ln, nil
}

func sinkServe(c net.Conn) {
	defer c.Close()
	op := make([]byte, 1)
	if _, err := io.ReadFull(c, op); err != nil {
		return
	}
	if op[0] == 'u' {
		io.Copy(io.Discard, c)
		return
	}
	buf := make([]byte, sniChunk)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// pulsarProxySNIPath runs pulsar-proxy with only its SNI listener, the sink as its one
// discovered TLS broker (pulsar+ssl://localhost:port), pinned to cpu.
func pulsarProxySNIPath(dir, bin, sink, caFile string, cpu int) (*path, error) {
	dir = filepath.Join(dir, pathPulsarProxySNI)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(sink)
	wrapper := filepath.Join(dir, "pulsar-proxy-pinned")
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\nexec taskset -c %d %q \"$@\"\n", cpu, bin)), 0o755); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf("listen: {pulsar: \"\", pulsarSNI: \"127.0.0.1:0\", http: \"127.0.0.1:0\"}\n"+
		"discovery: {static: {brokers: [\"pulsar+ssl://%s:%s\"]}}\nbroker: {allowedPorts: [%s], tls: {enabled: true, trustCertsFile: %q}}\n"+
		"log: {level: info, sessionSummary: \"off\"}\n", sniName, port, port, caFile)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	p, err := proxyproc.StartConfig(wrapper, dir, cfgPath, nil)
	if err != nil {
		return nil, err
	}
	return &path{Name: pathPulsarProxySNI, ep: endpoint{addr: p.SNIAddr}, pid: p.PID(), metrics: p.HTTPURL + "/metrics",
		stop: func() { p.Stop() }}, nil
}

// haproxySNIPath runs HAProxy in TCP mode routing on the ClientHello's server name
// (req.ssl_sni, after waiting for the hello with tcp-request inspect-delay), splice on in both
// directions as for haproxy-splice, pinned to cpu.
func haproxySNIPath(dir, sink string, cpu int) (*path, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("haproxy is not installed (Debian: apt-get install haproxy): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`global
    maxconn 2500
defaults
    mode tcp
    maxconn 2500
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    option splice-auto
    option splice-request
    option splice-response
frontend sni
    bind 127.0.0.1:%d
    tcp-request inspect-delay 5s
    tcp-request content accept if { req.ssl_hello_type 1 }
    use_backend broker if { req.ssl_sni -i %s }
backend broker
    server broker1 %s
`, port, sniName, sink)
	confPath := filepath.Join(dir, pathHAProxySNISplice+".cfg")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := startProcess(pinned(exec.Command(bin, "-db", "-f", confPath), cpu), filepath.Join(dir, pathHAProxySNISplice+".log"))
	if err != nil {
		return nil, err
	}
	p.Name = pathHAProxySNISplice
	p.ep = endpoint{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if !wait.Within(30*time.Second, func() bool {
		c, err := net.Dial("tcp", p.ep.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		p.stop()
		return nil, fmt.Errorf("%s did not listen", pathHAProxySNISplice)
	}
	return p, nil
}

// writeSNIResults writes the runs (JSON) and the side-by-side table (Markdown): per
// direction and connection count, the median over rounds of each path's CPU s/GB and MB/s,
// and pulsar-proxy's CPU s/GB over HAProxy's.
func writeSNIResults(res *sniResults, outDir string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, sniResultsName+".json"), b, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# SNI relay: pulsar-proxy beside HAProxy (req.ssl_sni, splice)\n\n%s; %s. Payload through TLS the proxies do not terminate; "+
		"CPU s/GB is the proxy process's user+system time per 10^9 payload bytes (median of rounds).\n\n", res.Date, res.Pinning)
	md.WriteString("| direction | connections | pulsar-proxy-sni CPU s/GB | haproxy-sni-splice CPU s/GB | ratio | pulsar-proxy-sni MB/s | haproxy-sni-splice MB/s |\n|---|---|---|---|---|---|---|\n")
	for _, dir := range []string{"upload", "download"} {
		for _, n := range sniConnCounts(res) {
			ours, theirs := sniMedian(res, pathPulsarProxySNI, dir, n), sniMedian(res, pathHAProxySNISplice, dir, n)
			fmt.Fprintf(&md, "| %s | %d | %.2f | %.2f | %.2f× | %.0f | %.0f |\n", dir, n, ours.CPUPerGB, theirs.CPUPerGB,
				ours.CPUPerGB/theirs.CPUPerGB, ours.MBps, theirs.MBps)
		}
	}
	return os.WriteFile(filepath.Join(outDir, sniResultsName+".md"), []byte(md.String()), 0o644)
}

func sniConnCounts(res *sniResults) []int {
	var out []int
	for _, r := range res.Runs {
		if !containsInt(out, r.Conns) {
			out = append(out, r.Conns)
		}
	}
	return out
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// sniMedian is the run with the median CPU s/GB of path, direction and count over the rounds.
func sniMedian(res *sniResults, path, dir string, n int) sniRun {
	var runs []sniRun
	for _, r := range res.Runs {
		if r.Path == path && r.Direction == dir && r.Conns == n {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return sniRun{}
	}
	for i := range runs {
		for j := i + 1; j < len(runs); j++ {
			if runs[j].CPUPerGB < runs[i].CPUPerGB {
				runs[i], runs[j] = runs[j], runs[i]
			}
		}
	}
	return runs[len(runs)/2]
}
