//go:build linux

package rig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// The rig's answers to bad input: a missing tool, a version that does not resolve, a port that
// is taken, a broker that is not ready in time. Each must end with a clear message and a non-zero
// exit, and leave nothing running. They use their own state dirs and a private block of ports, so
// they never touch a rig started by another test or by `make rig-up`.

// needTools skips the test (outside CI) when one of the tools is not on PATH; on CI it fails.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if OnCI() {
				t.Fatalf("%s is not on PATH; on CI this test may not skip", tool)
			}
			t.Skipf("skipping: %s is not on PATH (this case needs it)", tool)
		}
	}
}

// pathWithout returns a directory of symlinks to every executable on PATH except the named ones,
// for use as PATH: the scripts then find bash, coreutils, curl, go... but not those tools.
func pathWithout(t *testing.T, exclude ...string) string {
	t.Helper()
	dir := t.TempDir()
	skip := map[string]bool{}
	for _, e := range exclude {
		skip[e] = true
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if d == "" {
			continue
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			link := filepath.Join(dir, name)
			if skip[name] || fileExists(link) {
				continue
			}
			target := filepath.Join(d, name)
			st, err := os.Stat(target)
			if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				continue
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, need := range []string{"bash", "env", "dirname", "mkdir"} {
		if !fileExists(filepath.Join(dir, need)) {
			t.Fatalf("no %s on PATH to link into %s", need, dir)
		}
	}
	for _, e := range exclude {
		if fileExists(filepath.Join(dir, e)) {
			t.Fatalf("%s still in %s", e, dir)
		}
	}
	return dir
}

// rigPortVars are the env vars of every port rig.sh up checks and binds.
var rigPortVars = []string{
	"RIG_BROKER1_PORT", "RIG_BROKER1_HTTP_PORT", "RIG_BROKER2_PORT", "RIG_BROKER2_HTTP_PORT",
	"RIG_ZK_PORT", "RIG_BOOKIE_PORT", "RIG_CONSUL_HTTP_PORT", "RIG_CONSUL_DNS_PORT",
	"RIG_CONSUL_SERF_LAN_PORT", "RIG_CONSUL_SERF_WAN_PORT", "RIG_CONSUL_SERVER_PORT",
	"RIG_CONSUL_GRPC_PORT", "RIG_CONSUL_GRPC_TLS_PORT",
}

// privatePorts picks a block of consecutive ports in 29000-32499 that are free on 127.0.0.1 for
// TCP and UDP, one per rigPortVars entry: clear of the default rig (1xxxx), the auth rig
// (2xxxx below 29000) and the kernel's ephemeral range (from 32768), whose client sockets
// could otherwise take a port between the check and the bind.
func privatePorts(t *testing.T) map[string]int {
	t.Helper()
	free := func(p int) bool {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		u.Close()
		return true
	}
	for try := 0; try < 100; try++ {
		base := 29000 + rand.IntN(3500-len(rigPortVars))
		ok := true
		for i := range rigPortVars {
			if !free(base + i) {
				ok = false
				break
			}
		}
		if ok {
			m := map[string]int{}
			for i, v := range rigPortVars {
				m[v] = base + i
			}
			return m
		}
	}
	t.Fatal("no free block of ports in 29000-32499")
	return nil
}

// scriptEnv is this process's environment without any RIG_* or PULSAR_PROXY_RIG setting (so a
// developer's exports do not leak in), plus set.
func scriptEnv(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RIG_") || k == EnvAttach {
			continue
		}
		if _, ok := set[k]; ok {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

type scriptRun struct {
	out  string // stdout and stderr, interleaved
	code int
	took time.Duration
}

// runRigScript runs test/rig/<script> args with the env from scriptEnv(set), bounded by timeout
// (SIGTERM first, so rig.sh stops what it started, then SIGKILL 60 s later).
func runRigScript(t *testing.T, timeout time.Duration, set map[string]string, script string, args ...string) scriptRun {
	t.Helper()
	dir, err := ScriptsDir()
	if err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash") // resolved with the test's PATH, not the one in set
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Env = scriptEnv(set)
	cmd.Dir = t.TempDir()
	dieWithParent(cmd)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 60 * time.Second
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	began := time.Now()
	err = cmd.Run()
	r := scriptRun{out: buf.String(), took: time.Since(began)}
	t.Logf("%s %s (%.1fs):\n%s", script, strings.Join(args, " "), r.took.Seconds(), r.out)
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not finish within %s", script, strings.Join(args, " "), timeout)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.code = 0
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running %s: %v", script, err)
	}
	return r
}

// notClear matches what a clear message must not contain: a Java or Go stack trace, a bash error
// (set -u, a missing command, a syntax error), a raw Go error from os/exec.
var notClear = regexp.MustCompile(`(?m)Exception in thread|^\s+at [a-z]+\.[\w.$]+\(|^panic:|^goroutine \d|` +
	`line \d+: |unbound variable|command not found|syntax error|: No such file or directory$`)

// logTail matches the log excerpts rig.sh shows on purpose (they may hold the JVM's traces).
var logTail = regexp.MustCompile(`(?s)---- last 40 lines of (\S+) ----\n.*?---- end of (\S+) ----\n`)

// assertClear checks a non-zero exit (want, when > 0), that out contains every fragment, and that
// outside the log excerpts it has no stack trace or shell error.
func assertClear(t *testing.T, r scriptRun, wantCode int, fragments ...string) {
	t.Helper()
	if r.code == 0 {
		t.Errorf("exit 0, want non-zero")
	} else if wantCode > 0 && r.code != wantCode {
		t.Errorf("exit %d, want %d", r.code, wantCode)
	}
	for _, f := range fragments {
		if !strings.Contains(r.out, f) {
			t.Errorf("output does not contain %q", f)
		}
	}
	if m := notClear.FindString(logTail.ReplaceAllString(r.out, "")); m != "" {
		t.Errorf("output has a stack trace or shell error (%q), want a plain message", m)
	}
}

// procsMentioning lists the processes whose command line contains dir.
func procsMentioning(dir string) map[int]string {
	found := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cmdline := strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		if strings.Contains(cmdline, dir) {
			found[pid] = cmdline
		}
	}
	return found
}

// assertNothingRunning fails when a process still mentions rigDir (it waits up to 5 s for
// processes that are exiting), and registers nothing: see reapRig.
func assertNothingRunning(t *testing.T, rigDir string) {
	t.Helper()
	var left map[int]string
	if wait.Within(5*time.Second, func() bool {
		left = procsMentioning(rigDir)
		return len(left) == 0
	}) {
		return
	}
	for pid, c := range left {
		if len(c) > 300 {
			c = c[:300] + "..."
		}
		t.Errorf("still running after the failure: pid %d: %s", pid, c)
	}
}

// reapRig registers a cleanup that, should the test have left processes of rigDir behind (they
// were started by this test), runs rig.sh down for it and then SIGKILLs what is left of them.
func reapRig(t *testing.T, rigDir string, set map[string]string) {
	t.Cleanup(func() {
		if len(procsMentioning(rigDir)) == 0 {
			return
		}
		runRigScript(t, 3*time.Minute, set, "rig.sh", "down")
		for pid := range procsMentioning(rigDir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// rigSettings is the env for rig.sh up in its own state dir, on a private port block, with the
// cache the rest of the suite uses (cacheDir: RIG_CACHE or <repo>/.cache).
func rigSettings(t *testing.T) (rigDir string, set map[string]string, ports map[string]int) {
	t.Helper()
	cache, err := cacheDir()
	if err != nil {
		t.Fatal(err)
	}
	rigDir = t.TempDir()
	set = map[string]string{"RIG_DIR": rigDir, "RIG_CACHE": cache}
	if b := os.Getenv("RIG_CONSUL_BIN"); b != "" {
		set["RIG_CONSUL_BIN"] = b
	}
	ports = privatePorts(t)
	for k, p := range ports {
		set[k] = strconv.Itoa(p)
	}
	reapRig(t, rigDir, set)
	return rigDir, set, ports
}

// assertNothingStarted checks that rig.sh launched no process: no logs or pids were written and
// no process mentions rigDir.
func assertNothingStarted(t *testing.T, rigDir string) {
	t.Helper()
	for _, d := range []string{"logs", "pids", "rig.env"} {
		if fileExists(filepath.Join(rigDir, d)) {
			t.Errorf("%s exists: something was started", filepath.Join(rigDir, d))
		}
	}
	assertNothingRunning(t, rigDir)
}

// 1. No java: CheckPrerequisites and rig.sh up (also fetch-pulsar.sh on an empty cache) name it.
func TestBadInputNoJava(t *testing.T) {
	noJava := pathWithout(t, "java")

	t.Run("CheckPrerequisites", func(t *testing.T) {
		t.Setenv("PATH", noJava)
		err := CheckPrerequisites()
		var pe *PrereqError
		if !errors.As(err, &pe) || !strings.Contains(pe.Reason, "java") {
			t.Fatalf("CheckPrerequisites without java: %v, want a *PrereqError naming java", err)
		}
	})

	t.Run("rig.sh up", func(t *testing.T) {
		rigDir, set, _ := rigSettings(t)
		set["PATH"] = noJava
		r := runRigScript(t, time.Minute, set, "rig.sh", "up")
		assertClear(t, r, 2, "java is not on PATH", "Java 17")
		assertNothingStarted(t, rigDir)
	})

	t.Run("fetch-pulsar.sh", func(t *testing.T) {
		cache := t.TempDir()
		r := runRigScript(t, time.Minute, map[string]string{"PATH": noJava, "RIG_CACHE": cache}, "fetch-pulsar.sh")
		assertClear(t, r, 2, "java is not on PATH")
		assertNoClasspath(t, cache)
	})
}

func assertNoClasspath(t *testing.T, cache string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(cache, "pulsar-*", "classpath.txt*"))
	if len(m) > 0 {
		t.Errorf("a classpath was written: %v", m)
	}
}

// 2. No mvn and nothing cached: fetch-pulsar.sh and CheckPrerequisites name mvn.
func TestBadInputNoMaven(t *testing.T) {
	needTools(t, "java") // without java the scripts stop at java first
	noMvn := pathWithout(t, "mvn")
	cache := t.TempDir() // empty: the jars would have to be downloaded

	t.Run("CheckPrerequisites", func(t *testing.T) {
		t.Setenv("PATH", noMvn)
		t.Setenv("RIG_CACHE", cache)
		err := CheckPrerequisites()
		var pe *PrereqError
		if !errors.As(err, &pe) || !strings.Contains(pe.Reason, "mvn") {
			t.Fatalf("CheckPrerequisites without mvn and an empty cache: %v, want a *PrereqError naming mvn", err)
		}
	})

	t.Run("fetch-pulsar.sh", func(t *testing.T) {
		r := runRigScript(t, time.Minute, map[string]string{"PATH": noMvn, "RIG_CACHE": cache}, "fetch-pulsar.sh")
		assertClear(t, r, 2, "mvn is not on PATH", "download the Pulsar jars")
		assertNoClasspath(t, cache)
	})
}

// 3. A Pulsar version that does not exist: fetch-pulsar.sh says it does not resolve and names the
// artifact. It asks the Maven registry, which answers not-found within seconds.
func TestBadInputPulsarVersionDoesNotResolve(t *testing.T) {
	needTools(t, "java", "mvn")
	const bogus = "0.0.1-nonexistent"
	cache := t.TempDir()
	r := runRigScript(t, 3*time.Minute, map[string]string{"RIG_CACHE": cache, "RIG_PULSAR_VERSION": bogus}, "fetch-pulsar.sh")
	assertClear(t, r, 3,
		"could not resolve the Pulsar "+bogus+" jars",
		"org.apache.pulsar:pulsar-broker:jar:"+bogus,
		"RIG_PULSAR_VERSION="+bogus,
		filepath.Join(cache, "pulsar-"+bogus, "mvn.log"))
	if strings.Contains(r.out, "[ERROR]") {
		t.Error("output has Maven's raw [ERROR] lines, want the summary only")
	}
	assertNoClasspath(t, cache)
}

// 4. A port that is taken: rig.sh up names it and starts nothing (not even a download).
func TestBadInputPortTaken(t *testing.T) {
	needTools(t, "java", "curl")
	rigDir, set, ports := rigSettings(t)
	// Broker 1's port of the private block, or any free one should that have been taken since.
	l, err := net.Listen("tcp", "127.0.0.1:"+set["RIG_BROKER1_PORT"])
	if err != nil {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	set["RIG_BROKER1_PORT"] = strconv.Itoa(taken)

	r := runRigScript(t, time.Minute, set, "rig.sh", "up")
	assertClear(t, r, 1, fmt.Sprintf("port(s) already in use on this machine: %d\n", taken), "RIG_BROKER{1,2}_PORT")
	for k, p := range ports {
		if k != "RIG_BROKER1_PORT" && regexp.MustCompile(`(^|\D)`+strconv.Itoa(p)+`(\D|$)`).MatchString(r.out) {
			t.Errorf("output names port %d (%s), which is free", p, k)
		}
	}
	for _, started := range []string{"fetch-pulsar:", "consul:", "rig: started"} {
		if strings.Contains(r.out, started) {
			t.Errorf("output has %q: work started before the port check", started)
		}
	}
	assertNothingStarted(t, rigDir)
}

// 5. A broker that is not ready in time: rig.sh up shows the tail of its log, stops everything it
// started and exits 1. ZooKeeper and the bookie get their usual time; the brokers 3 s. (Should a
// broker have logged nothing at all, rig.sh says "brokerN has written no log yet".)
func TestBadInputBrokerNotReady(t *testing.T) {
	needTools(t, "java", "curl")
	if err := CheckPrerequisites(); err != nil {
		if OnCI() {
			t.Fatalf("%v; on CI this test may not skip", err)
		}
		t.Skipf("skipping: %v", err)
	}
	rigDir, set, _ := rigSettings(t)
	for k, v := range map[string]string{
		"RIG_BROKER_TIMEOUT":    "3",
		"RIG_ZK_BOOKIE_TIMEOUT": "180",
		"RIG_CONSUL_TIMEOUT":    "60",
		"RIG_STOP_TIMEOUT":      "20",
		// No class-data-sharing: a broker stopped half-way must not write (or wait to write) the
		// archive the other rigs map.
		"RIG_CDS":                  "0",
		"RIG_BROKER1_HEAP":         "256m",
		"RIG_BROKER2_HEAP":         "256m",
		"RIG_BROKER_DIRECT_MEMORY": "256m",
		// The JVM's first GC line goes to logs/broker1.out at once, so there is a log to show
		// even though log4j has written nothing 3 s after the start.
		"RIG_JAVA_OPTS": "-Xlog:gc",
	} {
		set[k] = v
	}
	r := runRigScript(t, 6*time.Minute, set, "rig.sh", "up")
	assertClear(t, r, 1, "broker 1 not ready within 3s", "startup failed; stopping what was started")

	// The tail of broker 1's log: every line shown is in the log file (logs are kept).
	logs := filepath.Join(rigDir, "logs")
	header := regexp.MustCompile(`---- last 40 lines of (` + regexp.QuoteMeta(logs) + `/broker1\.(?:log|out)) ----\n`)
	m := header.FindStringSubmatchIndex(r.out)
	switch {
	case m != nil:
		file := r.out[m[2]:m[3]]
		rest := r.out[m[1]:]
		end := strings.Index(rest, "---- end of "+file+" ----")
		if end < 0 {
			t.Fatalf("no end marker after the tail of %s", file)
		}
		shown := rest[:end]
		shown = shown[:strings.LastIndex(shown, "\n")+1] // the marker line starts with "rig: "
		tail := strings.Split(strings.TrimRight(shown, "\n"), "\n")
		content, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(tail) == 0 || len(tail) > 40 {
			t.Errorf("tail of %s has %d lines, want 1-40", file, len(tail))
		}
		for _, line := range tail {
			if !bytes.Contains(content, []byte(line)) {
				t.Errorf("shown as the tail of %s but not in it: %q", file, line)
			}
		}
	default:
		t.Errorf("output has no tail of broker 1's log (%s/broker1.log or .out)", logs)
	}
	if strings.Contains(r.out, "rig: up (") {
		t.Error("output says the rig is up")
	}
	assertNothingRunning(t, rigDir)
	if fileExists(filepath.Join(rigDir, "rig.env")) {
		t.Error("rig.env written for a failed start")
	}
}
