//go:build linux

package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// path is one way from the load generator to the broker.
type path struct {
	Name    string
	ep      endpoint
	pid     int    // the proxy process; 0 for the direct path
	pprof   string // http://host:port of the proxy's /debug/pprof, pulsar-proxy only
	metrics string // http://host:port of the proxy's /metrics, pulsar-proxy only
	stop    func()
}

const (
	pathDirect      = "direct"
	pathPulsarProxy = "pulsar-proxy"
	// pathPulsarProxyFramed is pulsar-proxy reading every frame (session.passthrough off), as
	// it forwards when authentication or authorization is on.
	pathPulsarProxyFramed = "pulsar-proxy-framed"
	// pathPulsarProxyMultiplex is pulsar-proxy with broker.multiplex on: the clients share a few
	// broker connections (ids mapped, every frame read), otherwise configured as the framed path.
	pathPulsarProxyMultiplex = "pulsar-proxy-multiplex"
	pathJavaProxy            = "java-proxy"
	pathHAProxy              = "haproxy"
	// pathHAProxySplice is HAProxy with kernel splicing on (option splice-auto,
	// splice-request and splice-response): the L4 floor at its best.
	pathHAProxySplice = "haproxy-splice"
)

func brokerAddr(brokerURL string) (string, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

func directPath(broker string) *path {
	return &path{Name: pathDirect, ep: endpoint{addr: broker}, stop: func() {}}
}

// pulsarProxyPath builds and runs this repository's proxy in front of the broker, as path
// name, forwarding unframed (passthrough) or frame by frame.
func pulsarProxyPath(dir, brokerURL, broker, name string, passthrough bool) (*path, error) {
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin, err := proxyproc.Build(dir)
	if err != nil {
		return nil, err
	}
	return startPulsarProxy(bin, dir, brokerURL, broker, name,
		fmt.Sprintf("session:\n  passthrough: %t\nlog:\n  level: info\n  sessionSummary: off\n", passthrough), -1)
}

// startPulsarProxy runs the proxy binary bin in dir with brokerURL as its static discovery
// and extraYAML added to its config, with /debug/pprof on; pinned to cpu when cpu >= 0 (a
// wrapper script execs taskset, which execs the proxy: the PID stays the proxy's).
func startPulsarProxy(bin, dir, brokerURL, broker, name, extraYAML string, cpu int) (*path, error) {
	if cpu >= 0 {
		wrapper := filepath.Join(dir, "pulsar-proxy-pinned")
		script := fmt.Sprintf("#!/bin/sh\nexec taskset -c %d %q \"$@\"\n", cpu, bin)
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			return nil, err
		}
		bin = wrapper
	}
	pprofPort, err := freePort()
	if err != nil {
		return nil, err
	}
	// listen.pprof through the environment: proxyproc writes the listen section itself, and
	// passes on none of this process's PULSAR_PROXY_* variables, only its own Env.
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", pprofPort)
	saved := proxyproc.Env
	proxyproc.Env = append(slices.Clip(saved), "PULSAR_PROXY_LISTEN_PPROF="+pprofAddr)
	p, err := proxyproc.Start(bin, dir, []string{brokerURL}, extraYAML)
	proxyproc.Env = saved
	if err != nil {
		return nil, err
	}
	return &path{Name: name, ep: endpoint{addr: p.Addr, target: broker}, pid: p.PID(),
		pprof: "http://" + pprofAddr, metrics: p.HTTPURL + "/metrics", stop: func() { p.Stop() }}, nil
}

// javaTarget is what the Java proxy forwards to: its static broker URLs and the host:port
// its clients name in proxy_to_broker_url.
type javaTarget struct {
	cluster    string
	brokerURL  string // pulsar://host:port
	brokerHTTP string // http://host:port
}

// javaProxyConf is the configuration the Java proxy runs with, ${...} to be filled in.
//
//go:embed java-proxy.conf
var javaProxyConf string

// javaProxyPath runs Apache Pulsar's proxy from the rig's jars with java-proxy.conf: its
// defaults, static broker URLs (no metadata store), zero-copy mode on, and direct connections
// allowed to the target's port (its default allows only 6650 and 6651); pinned to cpu when
// cpu >= 0.
func javaProxyPath(ctx context.Context, dir string, t javaTarget, cpu int) (*path, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	webPort, err := freePort()
	if err != nil {
		return nil, err
	}
	values := map[string]string{
		"clusterName": t.cluster, "brokerServiceURL": t.brokerURL, "brokerWebServiceURL": t.brokerHTTP,
		"servicePort": fmt.Sprint(port), "webServicePort": fmt.Sprint(webPort),
	}
	conf := os.Expand(javaProxyConf, func(k string) string { return values[k] })
	confPath := filepath.Join(dir, "java-proxy.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd, err := rig.JavaCommand(ctx, "512m", dir, "java-proxy", rig.ProxyMainClass, "-c", confPath)
	if err != nil {
		return nil, err
	}
	broker, _ := brokerAddr(t.brokerURL)
	p, err := startProcess(pinned(cmd, cpu), filepath.Join(dir, "java-proxy.out"))
	if err != nil {
		return nil, err
	}
	p.Name = pathJavaProxy
	p.ep = endpoint{addr: fmt.Sprintf("127.0.0.1:%d", port), target: broker}
	if err := waitConnect(p.ep, 3*time.Minute); err != nil {
		p.stop()
		return nil, fmt.Errorf("java proxy: %w (log in %s)", err, dir)
	}
	return p, nil
}

// haproxyOptions vary HAProxy between the benchmarks.
type haproxyOptions struct {
	// splice turns kernel splicing on as HAProxy's manual describes it: option splice-auto
	// (splice where its heuristics expect a gain) plus option splice-request and
	// splice-response (splice whenever possible, in each direction).
	splice  bool
	maxConn int // 0: 8000
	// maxPipes bounds the pipes splicing may hold (HAProxy's default is maxconn/4); each is
	// two descriptors, counted against the same limit as the connections.
	maxPipes int
	cpu      int // >= 0: pinned to this CPU (taskset)
}

// haproxyPath runs HAProxy in TCP mode, a byte pipe that understands nothing, as path name.
func haproxyPath(dir, broker, name string, o haproxyOptions) (*path, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("haproxy is not installed (Debian: apt-get install haproxy): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	maxConn := o.maxConn
	if maxConn == 0 {
		maxConn = 8000
	}
	global := fmt.Sprintf("    maxconn %d\n", maxConn)
	var options string
	if o.splice {
		if o.maxPipes > 0 {
			global += fmt.Sprintf("    maxpipes %d\n", o.maxPipes)
		}
		options = "    option splice-auto\n    option splice-request\n    option splice-response\n"
	}
	conf := fmt.Sprintf(`global
%sdefaults
    mode tcp
    maxconn %d
    timeout connect 5s
    timeout client 1h
    timeout server 1h
%sfrontend pulsar
    bind 127.0.0.1:%d
    default_backend broker
backend broker
    server broker1 %s
`, global, maxConn, options, port, broker)
	confPath := filepath.Join(dir, name+".cfg")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := startProcess(pinned(exec.Command(bin, "-db", "-f", confPath), o.cpu), filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	p.Name = name
	p.ep = endpoint{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if err := waitConnect(p.ep, 30*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

// startProcess runs cmd with its output in logPath; the process dies with the benchmark.
func startProcess(cmd *exec.Cmd, logPath string) (*path, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	return &path{pid: cmd.Process.Pid, stop: stop}, nil
}

// waitConnect retries a CONNECT through ep until it is answered.
func waitConnect(ep endpoint, timeout time.Duration) error {
	var err error
	if wait.Within(timeout, func() bool {
		var s *session
		if s, err = dial(ep, false); err != nil {
			return false
		}
		s.conn.Close()
		return true
	}) {
		return nil
	}
	return err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// saveProfile fetches one of the proxy's /debug/pprof profiles into file.
func saveProfile(base, name, file string) error {
	c := http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Get(base + "/debug/pprof/" + name)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", name, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pinned makes cmd run on cpu (taskset, which execs the command: the PID is the command's);
// cpu < 0 leaves it as it is.
func pinned(cmd *exec.Cmd, cpu int) *exec.Cmd {
	if cpu < 0 {
		return cmd
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return cmd // checkPinning refuses to start a run without taskset
	}
	args := append([]string{"taskset", "-c", fmt.Sprint(cpu), cmd.Path}, cmd.Args[1:]...)
	out := exec.Command(taskset, args[1:]...)
	out.Args = args
	out.Env, out.Dir = cmd.Env, cmd.Dir
	return out
}
