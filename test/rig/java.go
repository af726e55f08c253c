package rig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Main classes in the rig's jars.
const (
	PerfMainClass       = "org.apache.pulsar.testclient.PulsarPerfTestTool"    // pulsar-perf
	ProxyMainClass      = "org.apache.pulsar.proxy.server.ProxyServiceStarter" // the Java Pulsar proxy
	StandaloneMainClass = "org.apache.pulsar.PulsarStandaloneStarter"          // broker 1
	BrokerMainClass     = "org.apache.pulsar.PulsarBrokerStarter"              // broker 2
	TokensMainClass     = "org.apache.pulsar.utils.auth.tokens.TokensCliUtils" // JWT tool
)

// ClasspathFile returns the path of the file holding the cached Pulsar classpath.
func ClasspathFile() (string, error) {
	return inCache("pulsar-", "PULSAR_VERSION", "classpath.txt")
}

// JavaClasspath returns the classpath (jars joined by ':') of the pinned Pulsar broker, proxy,
// pulsar-perf and log4j, as fetch-pulsar.sh cached it. It fails when a jar is missing; run
// test/rig/fetch-pulsar.sh (or rig.Start) first.
func JavaClasspath() (string, error) {
	f, err := ClasspathFile()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("rig: Pulsar classpath not cached (run test/rig/fetch-pulsar.sh): %w", err)
	}
	cp := strings.TrimSpace(string(b))
	for _, jar := range strings.Split(cp, ":") {
		if _, err := os.Stat(jar); err != nil {
			return "", fmt.Errorf("rig: Pulsar classpath incomplete (run test/rig/fetch-pulsar.sh): %w", err)
		}
	}
	return cp, nil
}

// JavaFlags returns the JVM options the rig's brokers run with (Pulsar's launch-script flags,
// the class-data-sharing archive when there is one, log4j2.xml logging to logDir/logFile),
// with heap as -Xms/-Xmx (e.g. "512m").
func JavaFlags(heap, logDir, logFile string) ([]string, error) {
	dir, err := ScriptsDir()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("bash", filepath.Join(dir, "rig.sh"), "java-flags", heap, logDir, logFile).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("rig: rig.sh java-flags: %w: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("rig: rig.sh java-flags: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// JavaCommand returns a command that runs mainClass from the rig's jars with JavaFlags, logging
// to logDir/<name>.log (the process's stdout and stderr are left to the caller). For pulsar-perf
// use PerfCommand.
func JavaCommand(ctx context.Context, heap, logDir, name, mainClass string, args ...string) (*exec.Cmd, error) {
	cp, err := JavaClasspath()
	if err != nil {
		return nil, err
	}
	flags, err := JavaFlags(heap, logDir, name+".log")
	if err != nil {
		return nil, err
	}
	argv := append(flags, "-cp", cp, mainClass)
	argv = append(argv, args...)
	return exec.CommandContext(ctx, "java", argv...), nil
}

// PerfCommand returns a pulsar-perf command (PulsarPerfTestTool; 1 GiB heap, since its
// histograms need more than 256 MiB) logging to logDir/perf.log. pulsar-perf's first argument
// is a client config file, as bin/pulsar-perf passes it: this writes clientConf (may be empty)
// to logDir/perf-client.conf and passes that.
// For example:
//
//	cmd, err := rig.PerfCommand(ctx, dir, "", "produce", "-u", r.BrokerURL(1),
//		"-r", "1000", "-m", "10000", topic)
func PerfCommand(ctx context.Context, logDir, clientConf string, args ...string) (*exec.Cmd, error) {
	conf := filepath.Join(logDir, "perf-client.conf")
	if err := os.WriteFile(conf, []byte(clientConf), 0o644); err != nil {
		return nil, err
	}
	return JavaCommand(ctx, "1g", logDir, "perf", PerfMainClass, append([]string{conf}, args...)...)
}

// JavaProgram is a small Java client program of a test, compiled against the rig's Pulsar
// classpath.
type JavaProgram struct {
	Main    string // its class
	Classes string // where javac put it
	CP      string // the Pulsar classpath
}

// CompileJava compiles the source file src (a class of the default package), once: the classes
// go to the cache (javac/<digest of the source, the classpath and the Java version>), where
// every later call, of this process or another, finds them. A missing java or javac, or jars
// not cached, is a *PrereqError (see Need).
func CompileJava(ctx context.Context, src string) (*JavaProgram, error) {
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, &PrereqError{Reason: tool + " is not on PATH"}
		}
	}
	cp, err := JavaClasspath()
	if err != nil {
		return nil, &PrereqError{Reason: err.Error()}
	}
	dir, err := compiledDir(src, cp)
	if err != nil {
		return nil, err
	}
	prog := &JavaProgram{Main: strings.TrimSuffix(filepath.Base(src), ".java"), Classes: dir, CP: cp}
	if _, err := os.Stat(dir); err == nil {
		return prog, nil
	}
	// Compiled beside, then renamed into place: a process that finds the folder finds it whole.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "javac", "-encoding", "UTF-8", "-cp", cp, "-d", tmp, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac %s: %w\n%s", src, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr != nil { // not another process's compile
			return nil, err
		}
	}
	return prog, nil
}

// compiledDir is where CompileJava keeps src's classes.
func compiledDir(src, cp string) (string, error) {
	code, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	version, err := exec.Command("javac", "-version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("javac -version: %w", err)
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, part := range [][]byte{code, []byte(cp), version} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	name := strings.TrimSuffix(filepath.Base(src), ".java") + "-" + hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(cache, "javac", name)
	return dir, os.MkdirAll(filepath.Dir(dir), 0o755)
}

// ClientJVMFlags are the options of a test's short-lived Java client: the client compiler
// alone and the serial collector spend a fraction of the CPU the defaults spend warming up.
var ClientJVMFlags = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}

// Command runs the program with args, a small heap and ClientJVMFlags.
func (p *JavaProgram) Command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append(append([]string{"-Xmx512m"}, ClientJVMFlags...), "-cp", p.Classes+string(os.PathListSeparator)+p.CP, p.Main)
	return exec.CommandContext(ctx, "java", append(argv, args...)...)
}
