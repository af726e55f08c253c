package rig

import (
	"context"
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

// CompileJava compiles the source file src (a class of the default package) into dir. A
// missing java or javac, or jars not cached, is a *PrereqError (see Need).
func CompileJava(ctx context.Context, src, dir string) (*JavaProgram, error) {
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, &PrereqError{Reason: tool + " is not on PATH"}
		}
	}
	cp, err := JavaClasspath()
	if err != nil {
		return nil, &PrereqError{Reason: err.Error()}
	}
	if out, err := exec.CommandContext(ctx, "javac", "-encoding", "UTF-8", "-cp", cp, "-d", dir, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac %s: %w\n%s", src, err, out)
	}
	return &JavaProgram{Main: strings.TrimSuffix(filepath.Base(src), ".java"), Classes: dir, CP: cp}, nil
}

// Command runs the program with args and a small heap.
func (p *JavaProgram) Command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "java", append([]string{"-Xmx512m", "-cp", p.Classes + string(os.PathListSeparator) + p.CP, p.Main}, args...)...)
}
