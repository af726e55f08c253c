// Package rig runs, or attaches to, the end-to-end test rig: two Apache Pulsar brokers (plus a
// ZooKeeper process and a bookie process) and a Consul dev agent on 127.0.0.1 (see rig.sh in this folder),
// and talks to them over their REST APIs with net/http.
//
// Start runs the scripts in this folder (fetch-pulsar.sh, build-consul.sh, rig.sh up) unless the
// env var PULSAR_PROXY_RIG names the state file (rig.env) of a rig that is already up; then it
// attaches to that rig and Stop leaves it running.
package rig

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvAttach names the env var that points at the state file of a rig that is already up.
const EnvAttach = "PULSAR_PROXY_RIG"

// Broker is one broker of the rig.
type Broker struct {
	N   int    // 1 or 2 (a rig of RIG_BROKERS=1 has broker 1 alone)
	URL string // binary protocol, pulsar://127.0.0.1:16650
	// TLSURL is the TLS binary port, pulsar+ssl://127.0.0.1:16652; "" when the rig was
	// started without RIG_BROKERn_TLS_PORT.
	TLSURL string
	HTTP   string // admin and lookup REST, http://127.0.0.1:18080
	// HTTPS is the TLS web service, https://127.0.0.1:port; "" when the rig was started
	// without RIG_BROKERn_WEB_TLS_PORT.
	HTTPS string
	ID    string // the broker id the admin API uses, 127.0.0.1:18080
}

// Rig is a running rig.
type Rig struct {
	Dir        string // state directory (RIG_DIR)
	StateFile  string // Dir/rig.env
	Cluster    string // Pulsar cluster name, "standalone"
	Brokers    []Broker
	ConsulHTTP string // http://127.0.0.1:18500
	ConsulAddr string // 127.0.0.1:18500, for Consul API clients
	ZooKeeper  string // 127.0.0.1:12181
	// ZooKeeperTLS is ZooKeeper's TLS port (clients present a certificate), "" without
	// RIG_ZK_TLS_PORT.
	ZooKeeperTLS string

	owned bool
	opts  Options // how it was started, for later rig.sh calls and admin auth
	mu    sync.Mutex
	state map[string]string
	// brokerOps is held while a broker is started, stopped or killed (KeepBrokers too);
	// brokerDown (under mu) marks those stopped or killed on purpose.
	brokerOps  sync.Mutex
	brokerDown map[int]bool
	client     *http.Client
	// StartupTime is how long Start took (zero when attached).
	StartupTime time.Duration
}

// PrereqError reports a tool the rig needs that is not installed. Callers outside CI may turn
// it into a skip; everything else is a failure.
type PrereqError struct{ Reason string }

func (e *PrereqError) Error() string { return "rig prerequisite missing: " + e.Reason }

// ScriptsDir returns the folder that holds rig.sh and the other scripts.
func ScriptsDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(file)
		if fileExists(filepath.Join(dir, "rig.sh")) {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "test", "rig", "rig.sh")) {
			return filepath.Join(d, "test", "rig"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("rig: cannot find test/rig/rig.sh above %s", wd)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// CheckPrerequisites reports, as a *PrereqError, the first tool that Start would need and that
// is missing: bash, curl and java always, mvn while the Pulsar jars are not cached, go while
// Consul is not built.
func CheckPrerequisites() error {
	for _, tool := range []string{"bash", "curl", "java"} {
		if _, err := exec.LookPath(tool); err != nil {
			return &PrereqError{Reason: tool + " is not on PATH (the rig runs Pulsar from its jars with Java 17+)"}
		}
	}
	if _, err := JavaClasspath(); err != nil {
		if _, lerr := exec.LookPath("mvn"); lerr != nil {
			cp, _ := ClasspathFile()
			return &PrereqError{Reason: "mvn is not on PATH, and it is needed once to download the Pulsar jars (no complete " + cp + ")"}
		}
	}
	if _, err := ToolsClasspath(); err != nil {
		if _, lerr := exec.LookPath("mvn"); lerr != nil {
			cp, _ := ToolsClasspathFile()
			return &PrereqError{Reason: "mvn is not on PATH, and it is needed once to download the Pulsar admin CLI jars (no complete " + cp + ")"}
		}
	}
	bin, err := consulBinary()
	if err != nil {
		return err
	}
	if !fileExists(bin) {
		if _, err := exec.LookPath("go"); err != nil {
			return &PrereqError{Reason: "go is not on PATH and Consul is not built yet (" + bin + ")"}
		}
	}
	return nil
}

// Start brings the rig up (or attaches to the one named by PULSAR_PROXY_RIG) and waits until it
// is ready. Output of the scripts goes to os.Stderr. On failure nothing it started is left
// running.
func Start(ctx context.Context) (*Rig, error) {
	if p := os.Getenv(EnvAttach); p != "" {
		return Attach(ctx, p)
	}
	return StartWith(ctx, Options{})
}

// Options configure a rig that differs from the default one, for a test package that needs
// its own (e.g. with authentication); such a package uses its own port block and directory.
type Options struct {
	Dir string // RIG_DIR; "" = RIG_DIR from the environment or the default
	// Env are more KEY=VALUE settings for rig.sh, e.g. RIG_BROKER1_PORT=26650 or
	// RIG_BROKER_EXTRA_CONF=/path/auth.conf.
	Env []string
	// AdminToken is sent as "Authorization: Bearer" by the admin helpers and by rig.sh's
	// readiness checks (RIG_ADMIN_TOKEN): a superuser token of an auth-enabled rig.
	AdminToken string
}

func (o Options) env() []string {
	env := append(os.Environ(), o.Env...)
	if o.Dir != "" {
		env = append(env, "RIG_DIR="+o.Dir)
	}
	if o.AdminToken != "" {
		env = append(env, "RIG_ADMIN_TOKEN="+o.AdminToken)
	}
	return env
}

// StartWith brings up a rig configured by opts (it never attaches) and waits until it is
// ready. On failure nothing it started is left running.
func StartWith(ctx context.Context, opts Options) (*Rig, error) {
	if err := CheckPrerequisites(); err != nil {
		return nil, err
	}
	dir, err := ScriptsDir()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "rig.sh"), "up")
	cmd.Env = append(opts.env(), "RIG_OWNER_PID="+strconv.Itoa(os.Getpid()))
	dieWithParent(cmd)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		// rig.sh stops what it started when it fails by itself; when it was killed (ctx),
		// its processes may be left: tear them down.
		_ = runScriptEnv(context.Background(), os.Stderr, opts.env(), "down")
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rig: startup interrupted: %w", ctx.Err())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 {
			return nil, &PrereqError{Reason: "rig.sh up exited 2 (a tool is missing; see its output above)"}
		}
		return nil, fmt.Errorf("rig: rig.sh up failed: %w (its output is above; logs in %s)", err, defaultDirHint())
	}
	stateFile := stateFileFromEnv()
	if opts.Dir != "" {
		stateFile = filepath.Join(opts.Dir, "rig.env")
	}
	r, err := load(stateFile)
	if err != nil {
		_ = runScriptEnv(context.Background(), os.Stderr, opts.env(), "down")
		return nil, err
	}
	r.opts = opts
	r.owned = true
	r.StartupTime = time.Since(began)
	return r, nil
}

func defaultDirHint() string {
	if d := os.Getenv("RIG_DIR"); d != "" {
		return filepath.Join(d, "logs")
	}
	return ".rigs/rig/logs"
}

// DefaultDir is the state directory rig.sh uses with the current environment (RIG_DIR, or
// the rig folder of the state root, stateRoot).
func DefaultDir() string { return filepath.Dir(stateFileFromEnv()) }

// PrivateDir is the state folder of a package's own rig: the folder env names, or name in
// the state root (stateRoot).
func PrivateDir(env, name string) string {
	if d := os.Getenv(env); d != "" {
		return d
	}
	return filepath.Join(stateRoot(), name)
}

// stateRoot is where rigs keep their state: RIG_STATE, or <repo>/.rigs. Not the cache, which
// worktrees may share: two checkouts must not share a running rig's state.
func stateRoot() string {
	if d := os.Getenv("RIG_STATE"); d != "" {
		return d
	}
	dir, err := ScriptsDir()
	if err != nil {
		return ".rigs"
	}
	return filepath.Clean(filepath.Join(dir, "..", "..", ".rigs"))
}

// stateFileFromEnv is where rig.sh up writes its state with the current environment.
func stateFileFromEnv() string {
	if d := os.Getenv("RIG_DIR"); d != "" {
		return filepath.Join(d, "rig.env")
	}
	return filepath.Join(stateRoot(), "rig", "rig.env")
}

// Attach returns the rig whose state file (or state directory) is path, after checking that
// its brokers answer. Stop on it does nothing.
func Attach(ctx context.Context, path string) (*Rig, error) {
	return AttachWith(ctx, path, Options{})
}

// AttachWith is Attach for a rig started with opts (its admin token is used).
func AttachWith(ctx context.Context, path string, opts Options) (*Rig, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "rig.env")
	}
	r, err := load(path)
	if err != nil {
		return nil, fmt.Errorf("rig: %s=%s: %w", EnvAttach, path, err)
	}
	r.opts = opts
	for _, b := range r.Brokers {
		if err := r.brokerReady(ctx, b); err != nil {
			return nil, fmt.Errorf("rig: attached to %s but broker %d does not answer: %w", path, b.N, err)
		}
	}
	return r, nil
}

// load reads a rig.env.
func load(path string) (*Rig, error) {
	st, err := readState(path)
	if err != nil {
		return nil, err
	}
	r := &Rig{
		StateFile: path,
		Dir:       st["RIG_DIR"],
		state:     st,
		client:    &http.Client{Timeout: 60 * time.Second},
	}
	if err := r.apply(st); err != nil {
		return nil, fmt.Errorf("rig: state file %s: %w", path, err)
	}
	return r, nil
}

func (r *Rig) apply(st map[string]string) error {
	r.Cluster = st["CLUSTER"]
	r.ConsulHTTP = st["CONSUL_HTTP"]
	r.ConsulAddr = st["CONSUL_ADDR"]
	r.ZooKeeper = st["ZOOKEEPER"]
	r.ZooKeeperTLS = st["ZOOKEEPER_TLS"]
	r.Brokers = nil
	brokers := 2
	if st["BROKERS"] == "1" { // RIG_BROKERS=1: a one-broker cluster
		brokers = 1
	}
	for n := 1; n <= brokers; n++ {
		p := fmt.Sprintf("BROKER%d_", n)
		b := Broker{N: n, URL: st[p+"URL"], TLSURL: st[p+"TLS_URL"], HTTP: st[p+"HTTP"], HTTPS: st[p+"HTTPS"], ID: st[p+"ID"]}
		if b.URL == "" || b.HTTP == "" || b.ID == "" {
			return fmt.Errorf("missing %sURL/HTTP/ID", p)
		}
		r.Brokers = append(r.Brokers, b)
	}
	if r.Cluster == "" || r.Dir == "" || r.ConsulHTTP == "" && st["CONSUL"] != "0" {
		return errors.New("missing CLUSTER, CONSUL_HTTP or RIG_DIR")
	}
	return nil
}

func readState(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			st[k] = v
		}
	}
	return st, sc.Err()
}

// State returns one key of rig.env (e.g. "BROKER2_PID", "JAVA_CLASSPATH_FILE").
func (r *Rig) State(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state[key]
}

// Owned reports whether this process started the rig (and Stop will stop it).
func (r *Rig) Owned() bool { return r.owned }

// Broker returns broker n (1 or 2).
func (r *Rig) Broker(n int) Broker {
	if n < 1 || n > len(r.Brokers) {
		panic(fmt.Sprintf("rig: no broker %d", n))
	}
	return r.Brokers[n-1]
}

// BrokerURL is broker n's binary service URL (pulsar://...).
func (r *Rig) BrokerURL(n int) string { return r.Broker(n).URL }

// BrokerHTTP is broker n's web service URL (http://...).
func (r *Rig) BrokerHTTP(n int) string { return r.Broker(n).HTTP }

// BrokerID is broker n's id as the admin API names it (host:webport).
func (r *Rig) BrokerID(n int) string { return r.Broker(n).ID }

// BrokerByURL finds the broker with this binary URL, HTTP URL or id.
func (r *Rig) BrokerByURL(u string) (Broker, bool) {
	u = strings.TrimSuffix(u, "/")
	for _, b := range r.Brokers {
		if u == b.URL || u == b.HTTP || u == b.ID {
			return b, true
		}
	}
	return Broker{}, false
}

// Stop tears the rig down if this process started it; an attached rig is left alone.
func (r *Rig) Stop() error {
	if r == nil || !r.owned {
		return nil
	}
	r.owned = false
	return runScriptEnv(context.Background(), os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "down")
}

// StopBroker stops broker n (1 or 2) with SIGTERM, so its ZooKeeper session closes, and waits
// until the other broker no longer lists it. It affects every test using the rig; the admin
// helpers use the other broker meanwhile.
func (r *Rig) StopBroker(ctx context.Context, n int) error {
	r.brokerOps.Lock()
	defer r.brokerOps.Unlock()
	r.setBrokerDown(n, true)
	if err := runScriptEnv(ctx, os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "stop-broker", strconv.Itoa(n)); err != nil {
		return err
	}
	return r.reload()
}

// StartBroker starts broker n again and waits until it is ready and registered.
func (r *Rig) StartBroker(ctx context.Context, n int) error {
	r.brokerOps.Lock()
	defer r.brokerOps.Unlock()
	r.setBrokerDown(n, false)
	return r.startBrokerScript(ctx, n)
}

// startBrokerScript runs rig.sh start-broker n; the caller holds brokerOps.
func (r *Rig) startBrokerScript(ctx context.Context, n int) error {
	if err := runScriptEnv(ctx, os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "start-broker", strconv.Itoa(n)); err != nil {
		return err
	}
	return r.reload()
}

// KillBroker kills broker n with SIGKILL, as a crash: nothing is closed cleanly, so its
// ZooKeeper session (and the bundles it owns) stays until the session expires. Restart it
// with StartBroker.
func (r *Rig) KillBroker(ctx context.Context, n int) error {
	r.brokerOps.Lock()
	defer r.brokerOps.Unlock()
	r.setBrokerDown(n, true)
	if err := runScriptEnv(ctx, os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "kill-broker", strconv.Itoa(n)); err != nil {
		return err
	}
	return r.reload()
}

// SignalBroker sends sig to broker n's process (SIGSTOP freezes it, SIGCONT resumes it).
func (r *Rig) SignalBroker(n int, sig syscall.Signal) error {
	pid, err := strconv.Atoi(r.State(fmt.Sprintf("BROKER%d_PID", n)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("rig: broker %d is not running", n)
	}
	return syscall.Kill(pid, sig)
}

// StopConsul stops the Consul agent (SIGTERM). It is a dev agent: its registrations are gone
// when it comes back. It affects every test using the rig; restore it with StartConsul.
func (r *Rig) StopConsul(ctx context.Context) error {
	if err := runScriptEnv(ctx, os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "stop-consul"); err != nil {
		return err
	}
	return r.reload()
}

// StartConsul starts the Consul agent again and waits until it has a leader.
func (r *Rig) StartConsul(ctx context.Context) error {
	if err := runScriptEnv(ctx, os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "start-consul"); err != nil {
		return err
	}
	return r.reload()
}

// StopZooKeeper stops ZooKeeper alone (SIGTERM); the brokers and the bookie keep running and
// reconnect when it is back. It affects every test using the rig: keep the outage well under
// the brokers' session timeout (30 s) and restore it with StartZooKeeper.
func (r *Rig) StopZooKeeper(ctx context.Context) error {
	if err := runScriptEnv(ctx, os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "stop-zookeeper"); err != nil {
		return err
	}
	return r.reload()
}

// StartZooKeeper starts ZooKeeper again on its data and waits until it answers.
func (r *Rig) StartZooKeeper(ctx context.Context) error {
	if err := runScriptEnv(ctx, os.Stderr, append(r.opts.env(), "RIG_DIR="+r.Dir), "start-zookeeper"); err != nil {
		return err
	}
	return r.reload()
}

func (r *Rig) reload() error {
	st, err := readState(r.StateFile)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.state = st
	r.mu.Unlock()
	return nil
}

// runScriptEnv runs rig.sh with args and env added to the environment.
func runScriptEnv(ctx context.Context, out io.Writer, env []string, args ...string) error {
	dir, err := ScriptsDir()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(dir, "rig.sh")}, args...)...)
	cmd.Env = env
	dieWithParent(cmd)
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(out, &buf)
	cmd.Stderr = io.MultiWriter(out, &buf)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("rig: rig.sh %s: %w\n%s", strings.Join(args, " "), err, lastLines(buf.String(), 20))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (r *Rig) brokerReady(ctx context.Context, b Broker) error {
	var body []byte
	if err := r.doURL(ctx, http.MethodGet, b.HTTP+"/admin/v2/brokers/ready", nil, &body); err != nil {
		return err
	}
	if strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("ready: %q", body)
	}
	return nil
}

// cacheDir is RIG_CACHE or <repo>/.cache.
func cacheDir() (string, error) {
	if c := os.Getenv("RIG_CACHE"); c != "" {
		return c, nil
	}
	dir, err := ScriptsDir()
	if err != nil {
		return "", err
	}
	return filepath.Clean(filepath.Join(dir, "..", "..", ".cache")), nil
}

// Versions returns the pins of versions.env (PULSAR_VERSION, CONSUL_VERSION, ...), with
// PULSAR_VERSION replaced by RIG_PULSAR_VERSION when that is set, as the scripts do.
func Versions() (map[string]string, error) {
	dir, err := ScriptsDir()
	if err != nil {
		return nil, err
	}
	v, err := readState(filepath.Join(dir, "versions.env"))
	if err != nil {
		return nil, err
	}
	if o := os.Getenv("RIG_PULSAR_VERSION"); o != "" {
		v["PULSAR_VERSION"] = o
	}
	return v, nil
}

func consulBinary() (string, error) {
	if b := os.Getenv("RIG_CONSUL_BIN"); b != "" {
		return b, nil
	}
	return inCache("consul-", "CONSUL_VERSION")
}

// inCache is the path in the rig cache that the scripts give a pinned thing: prefix and the
// pin of versionKey (e.g. consul-v1.14.11), then more path elements.
func inCache(prefix, versionKey string, more ...string) (string, error) {
	v, err := Versions()
	if err != nil {
		return "", err
	}
	c, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{c, prefix + v[versionKey]}, more...)...), nil
}
