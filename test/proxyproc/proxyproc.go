// Package proxyproc builds and runs the real pulsar-proxy binary for end-to-end tests and the
// demo: a config file of their choosing, logs to a file, stopped with SIGTERM like in
// Kubernetes.
package proxyproc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// Build compiles cmd/pulsar-proxy into dir and returns the binary's path.
func Build(dir string) (string, error) {
	out := filepath.Join(dir, "pulsar-proxy")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/pulsar-proxy")
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build pulsar-proxy: %v\n%s", err, b)
	}
	return out, nil
}

// RepoRoot is the repository's root directory, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Proc is one running pulsar-proxy process.
type Proc struct {
	PulsarURL string // pulsar://127.0.0.1:port, the service URL clients use
	Addr      string // 127.0.0.1:port
	// PulsarTLSURL is pulsar+ssl://127.0.0.1:port when extraYAML has a top-level tls:
	// section; a TLS listener is then opened beside the plaintext one.
	PulsarTLSURL string
	TLSAddr      string
	// SNIAddr is 127.0.0.1:port of the SNI listener when the configuration sets
	// listen.pulsarSNI (StartConfig).
	SNIAddr string
	HTTPURL string // http://127.0.0.1:port
	// HTTPSURL is https://127.0.0.1:port when extraYAML sets admin.listenHTTPS.
	HTTPSURL string
	LogPath  string
	binary   string
	cfgPath  string
	env      []string
	cmd      *exec.Cmd
	exited   chan struct{}
	logErrs  []error // the log's bad lines, checked once the process has exited
}

// Start runs binary with the given brokers plus extraYAML appended to the generated config
// (top-level keys, e.g. "session:\n  handshakeTimeout: 1s\n"), in dir. It returns once the
// proxy has logged the addresses it bound and /healthz answers. With no brokers, extraYAML
// must hold the whole discovery section. Unless extraYAML sets broker.allowedPorts, the
// brokers' ports are allowed (the rig's are not 6650); the same for the web URLs' ports and
// broker.allowedWebPorts (the rig's are not 8080).
//
// The listeners bind port 0: the proxy picks free ports itself and names them in its startup
// line, which Start reads from the log, so no other process can take a port between a check
// and the bind. The log must therefore be JSON (the default) at level info or lower; Start
// writes `log: {level: debug, sessionSummary: info}` unless extraYAML has a log section.
func Start(binary, dir string, brokers []string, extraYAML string) (*Proc, error) {
	return StartWeb(binary, dir, brokers, nil, extraYAML)
}

// StartWeb is Start with the brokers' web service URLs too (discovery.static.webBrokers, one
// for each broker, in the same order), for the admin API through the proxy.
func StartWeb(binary, dir string, brokers, webBrokers []string, extraYAML string) (*Proc, error) {
	var b strings.Builder
	b.WriteString("listen:\n  pulsar: \"127.0.0.1:0\"\n  http: \"127.0.0.1:0\"\n")
	withTLS := strings.HasPrefix(extraYAML, "tls:") || strings.Contains(extraYAML, "\ntls:")
	if withTLS {
		b.WriteString("  pulsarTLS: \"127.0.0.1:0\"\n")
	}
	var ports, webPorts []string
	if len(brokers) > 0 {
		fmt.Fprintf(&b, "discovery:\n  healthCheckInterval: 500ms\n  static:\n    brokers:\n")
		for _, u := range brokers {
			fmt.Fprintf(&b, "      - %q\n", u)
			if i := strings.LastIndexByte(u, ':'); i >= 0 {
				ports = append(ports, u[i+1:])
			}
		}
		if len(webBrokers) > 0 {
			b.WriteString("    webBrokers:\n")
			for _, u := range webBrokers {
				fmt.Fprintf(&b, "      - %q\n", u)
				if i := strings.LastIndexByte(u, ':'); i >= 0 {
					webPorts = append(webPorts, strings.TrimSuffix(u[i+1:], "/"))
				}
			}
		}
	}
	b.WriteString(extraYAML)
	if !strings.Contains(extraYAML, "log:") {
		b.WriteString("log:\n  level: debug\n  sessionSummary: info\n")
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	var env []string
	if len(ports) > 0 && !strings.Contains(extraYAML, "allowedPorts") {
		env = append(env, "PULSAR_PROXY_BROKER_ALLOWED_PORTS="+strings.Join(ports, ","))
	}
	if len(webPorts) > 0 && !strings.Contains(extraYAML, "allowedWebPorts") {
		env = append(env, "PULSAR_PROXY_BROKER_ALLOWED_WEB_PORTS="+strings.Join(webPorts, ","))
	}
	return start(binary, dir, cfgPath, env, withTLS)
}

// StartConfig runs binary with the configuration file cfgPath as it is (plus env, added to
// this process's environment), logging to dir/proxy.log, and returns once it has logged its
// addresses and /healthz answers. The file must bind its listeners to port 0 or free ports,
// and log JSON at level info or lower (the defaults).
func StartConfig(binary, dir, cfgPath string, env []string) (*Proc, error) {
	return start(binary, dir, cfgPath, env, false)
}

func start(binary, dir, cfgPath string, env []string, withTLS bool) (*Proc, error) {
	p := &Proc{LogPath: filepath.Join(dir, "proxy.log"), binary: binary, cfgPath: cfgPath, env: env, exited: make(chan struct{})}
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(binary, "--config", cfgPath)
	p.cmd.Env = append(append(Environ(), Env...), env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() { p.cmd.Wait(); logFile.Close(); p.checkAtExit(); close(p.exited) }()

	// Polled until it answers /healthz, or fails to start (failed and exited say how).
	var failed error
	exited := false
	if !wait.Within(20*time.Second, func() bool {
		if p.HTTPURL == "" {
			if a, ok, err := startedLine(p.LogPath); err != nil {
				failed = err
				return true
			} else if ok {
				if withTLS && a.PulsarTLS == "" {
					failed = fmt.Errorf("pulsar-proxy started without the TLS listener its config asks for:\n%s", p.LogTail(30))
					return true
				}
				if a.Pulsar != "" {
					p.PulsarURL, p.Addr = "pulsar://"+a.Pulsar, a.Pulsar
				}
				p.HTTPURL, p.SNIAddr = "http://"+a.HTTP, a.PulsarSNI
				if a.PulsarTLS != "" {
					p.PulsarTLSURL, p.TLSAddr = "pulsar+ssl://"+a.PulsarTLS, a.PulsarTLS
				}
				if a.HTTPS != "" {
					p.HTTPSURL = "https://" + a.HTTPS
				}
			}
		}
		if p.HTTPURL != "" {
			if code, _ := p.Get("/healthz"); code == 200 {
				return true
			}
		}
		select {
		case <-p.exited:
			exited = true
			return true
		default:
			return false
		}
	}) {
		p.Stop()
		if p.HTTPURL == "" {
			return nil, fmt.Errorf("pulsar-proxy logged no %q line with its addresses (is the log JSON at level info or lower?):\n%s",
				startedMessage, p.LogTail(30))
		}
		return nil, fmt.Errorf("pulsar-proxy did not answer /healthz:\n%s", p.LogTail(30))
	}
	switch {
	case exited:
		return nil, fmt.Errorf("pulsar-proxy exited at start:\n%s", p.LogTail(30))
	case failed != nil:
		p.Stop()
		return nil, failed
	}
	return p, nil
}

// startedMessage is the message of the line the proxy (internal/app/proxy) logs once its
// listeners are bound, with their addresses in the fields pulsar, pulsar_tls and http.
const startedMessage = "pulsar-proxy started"

// Env is added to the environment of every proxy started (PULSAR_PROXY_* overrides), e.g.
// to run a whole suite with a setting on.
var Env []string

// Environ is this process's environment for a proxy it starts, without its PULSAR_PROXY_*
// variables: the proxy refuses one that names no setting, and the test tooling has its own
// (PULSAR_PROXY_RIG, PULSAR_PROXY_DASHBOARD_PNG, ...); a test gives the proxy its settings
// itself.
func Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULSAR_PROXY_") {
			env = append(env, kv)
		}
	}
	return env
}

// boundAddrs are the addresses of a startup line.
type boundAddrs struct {
	Pulsar    string `json:"pulsar"`
	PulsarTLS string `json:"pulsar_tls"`
	PulsarSNI string `json:"pulsar_sni"`
	HTTP      string `json:"http"`
	HTTPS     string `json:"https"`
	Message   string `json:"message"`
}

// startedLine finds the startup line in the log at path; ok is false while there is none.
func startedLine(path string) (a boundAddrs, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return a, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(startedMessage)) {
			continue
		}
		a = boundAddrs{}
		if json.Unmarshal(line, &a) != nil || a.Message != startedMessage {
			continue // a partly written line, or another line naming the message
		}
		if (a.Pulsar == "" && a.PulsarTLS == "" && a.PulsarSNI == "") || a.HTTP == "" {
			return a, false, fmt.Errorf("pulsar-proxy's startup line names no pulsar (nor pulsar_tls, nor pulsar_sni) or http address: %s", line)
		}
		return a, true, nil
	}
	return a, false, sc.Err()
}

// PID is the proxy process's id (for /proc readings in benchmarks).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM and waits for the drain; SIGKILL after 40 s. It reports whether the
// process stopped by itself.
func (p *Proc) Stop() (graceful bool) {
	select {
	case <-p.exited:
		return true
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(40 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		return false
	}
}

// Kill kills the process with SIGKILL, as a crash, and waits until it is gone.
func (p *Proc) Kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// Restart starts the same binary with the same configuration again, on the addresses this
// process had bound (its listeners bind them again), once it has exited. It logs to
// a fresh proxy.log, the old one in proxy.log.before-restart.
func (p *Proc) Restart() (*Proc, error) {
	select {
	case <-p.exited:
	default:
		return nil, fmt.Errorf("pulsar-proxy is still running")
	}
	b, err := os.ReadFile(p.cfgPath)
	if err != nil {
		return nil, err
	}
	cfg := strings.Replace(string(b), `pulsar: "127.0.0.1:0"`, fmt.Sprintf("pulsar: %q", p.Addr), 1)
	cfg = strings.Replace(cfg, `http: "127.0.0.1:0"`, fmt.Sprintf("http: %q", strings.TrimPrefix(p.HTTPURL, "http://")), 1)
	if err := os.WriteFile(p.cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logged, err := os.ReadFile(p.LogPath)
	if err != nil {
		return nil, err
	}
	// start reads the new process's startup line from a fresh log; the old one is kept.
	if err := os.WriteFile(p.LogPath+".before-restart", logged, 0o644); err != nil {
		return nil, err
	}
	return start(p.binary, filepath.Dir(p.LogPath), p.cfgPath, p.env, p.PulsarTLSURL != "")
}

// Get fetches a path of the proxy's HTTP endpoint; status 0 when it cannot be reached.
func (p *Proc) Get(path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.HTTPURL + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// LogDigest is what a failed test shows of the proxy's log: its last warnings and errors
// (at most problems lines) and its last tail lines. Short, so that a CI report that keeps
// only the end of the output still shows the test's own failure message above it.
func (p *Proc) LogDigest(problems, tail int) string {
	lines, err := p.logLines()
	if err != nil {
		return err.Error()
	}
	var bad []string
	for _, l := range lines[:max(0, len(lines)-tail)] {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			bad = append(bad, l)
		}
	}
	if len(bad) > problems {
		bad = append([]string{fmt.Sprintf("(%d earlier warnings and errors left out)", len(bad)-problems)}, bad[len(bad)-problems:]...)
	}
	if len(bad) > 0 {
		bad = append(bad, "…")
	}
	return strings.Join(append(bad, lines[max(0, len(lines)-tail):]...), "\n")
}

// LogTail returns the last n lines of the proxy's log.
func (p *Proc) LogTail(n int) string {
	lines, err := p.logLines()
	if err != nil {
		return err.Error()
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logLines is the proxy's log, a line each.
func (p *Proc) logLines() ([]string, error) {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n"), nil
}

// BuildTemp builds the proxy into a new temporary folder named after prefix; remove deletes
// the folder.
func BuildTemp(prefix string) (bin string, remove func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	if bin, err = Build(dir); err != nil {
		remove()
		return "", nil, err
	}
	return bin, remove, nil
}

// StartForTest is Start for a test: a failure to start fails it, and the proxy is stopped
// (SIGTERM) when it ends, its log tail shown if the test failed.
func StartForTest(t testing.TB, bin, dir string, brokers []string, extraYAML string) *Proc {
	t.Helper()
	p, err := Start(bin, dir, brokers, extraYAML)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Stop() {
			t.Errorf("pulsar-proxy did not stop on SIGTERM")
		}
		if errs := p.LogErrors(); len(errs) > 0 {
			t.Error(describe(p.LogPath, errs))
		}
		if t.Failed() {
			t.Logf("proxy log digest (%s):\n%s", p.LogPath, p.LogDigest(15, 12))
		}
	})
	return p
}
