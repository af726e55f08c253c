package rig

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Main classes and jars of the command-line tools (pom-tools.xml, tools-classpath.txt).
const (
	AdminMainClass = "org.apache.pulsar.admin.cli.PulsarAdminTool" // pulsar-admin
	// ExclamationFunction appends "!" to each message: the example function of Pulsar's docs.
	ExclamationFunction = "org.apache.pulsar.functions.api.examples.ExclamationFunction"
)

// ToolsClasspathFile returns the path of the file holding the cached tools classpath.
func ToolsClasspathFile() (string, error) {
	return inCache("pulsar-", "PULSAR_VERSION", "tools-classpath.txt")
}

// ToolsClasspath returns the classpath of the pinned admin CLI (pulsar-client-tools), the
// example functions and log4j, as fetch-pulsar.sh cached it; it fails when a jar is missing.
func ToolsClasspath() (string, error) {
	f, err := ToolsClasspathFile()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("rig: tools classpath not cached (run test/rig/fetch-pulsar.sh): %w", err)
	}
	cp := strings.TrimSpace(string(b))
	for _, jar := range strings.Split(cp, ":") {
		if _, err := os.Stat(jar); err != nil {
			return "", fmt.Errorf("rig: tools classpath incomplete (run test/rig/fetch-pulsar.sh): %w", err)
		}
	}
	return cp, nil
}

// FunctionsExamplesJar is the released pulsar-functions-api-examples jar of the pinned
// version (the package a Functions test deploys).
func FunctionsExamplesJar() (string, error) {
	cp, err := ToolsClasspath()
	if err != nil {
		return "", err
	}
	for _, jar := range strings.Split(cp, ":") {
		if strings.Contains(filepath.Base(jar), "pulsar-functions-api-examples-") {
			return jar, nil
		}
	}
	return "", fmt.Errorf("rig: no pulsar-functions-api-examples jar in the tools classpath")
}

// Admin runs Pulsar's admin CLI (pulsar-admin) from the rig's jars against one admin URL.
type Admin struct {
	URL   string // --admin-url, e.g. the proxy's http://127.0.0.1:port
	Token string // sent as the client's token (AuthenticationToken); "" = none
	Dir   string // its client config and log (Dir/admin-cli.log)
}

// AdminResult is one CLI run.
type AdminResult struct {
	Args   []string
	Stdout string
	Stderr string
	Err    error // non-nil: the CLI exited non-zero (or did not run)
	Took   time.Duration
}

func (r AdminResult) String() string {
	return fmt.Sprintf("pulsar-admin %s (%s): err=%v\nstdout: %s\nstderr: %s", strings.Join(r.Args, " "), r.Took.Round(time.Millisecond),
		r.Err, strings.TrimSpace(r.Stdout), strings.TrimSpace(r.Stderr))
}

// Run runs `pulsar-admin args...` and waits for it (at most two minutes). The JVM is tuned
// for a short run (C1 only, serial GC); log4j writes to Dir/admin-cli.log.
func (a Admin) Run(ctx context.Context, args ...string) AdminResult {
	res := AdminResult{Args: args}
	began := time.Now()
	cp, err := ToolsClasspath()
	if err != nil {
		res.Err = err
		return res
	}
	dir, err := ScriptsDir()
	if err != nil {
		res.Err = err
		return res
	}
	conf := filepath.Join(a.Dir, "admin-client.conf")
	c := "webServiceUrl=" + a.URL + "\nbrokerServiceUrl=pulsar://127.0.0.1:1\n"
	if a.Token != "" {
		c += "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\nauthParams=token:" + a.Token + "\n"
	}
	if err := os.WriteFile(conf, []byte(c), 0o600); err != nil {
		res.Err = err
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// The JVM's own warnings (class-data sharing's among them) go to stderr only: stdout is
	// the CLI's answer, which tests parse. Without -Xlog:disable the default output (warnings
	// to stdout) stays beside the one added, and a run that writes the archive prints
	// hundreds of lines of them into the answer.
	argv := []string{"-Xlog:disable", "-Xlog:all=warning:stderr", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xms64m", "-Xmx256m", "-Xss512k",
		"-Dlog4j.configurationFile=" + filepath.Join(dir, "log4j2.xml"), "-Dpulsar.log.dir=" + a.Dir, "-Dpulsar.log.file=admin-cli.log"}
	archive, training := cliArchive(cp)
	switch {
	case archive != "" && !training:
		argv = append(argv, "-XX:SharedArchiveFile="+archive)
	case training:
		argv = append(argv, "-XX:ArchiveClassesAtExit="+trainingFile(archive))
	}
	argv = append(argv, "-cp", cp, AdminMainClass, conf, "--admin-url", a.URL)
	cmd := exec.CommandContext(ctx, "java", append(argv, args...)...)
	dieWithParent(cmd)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	res.Err = cmd.Run()
	res.Stdout, res.Stderr, res.Took = out.String(), errb.String(), time.Since(began)
	if training {
		cliTrained(archive, res.Err == nil)
	}
	return res
}

// The admin CLI's class-data-sharing archive, like the brokers' (rig.sh): the first run
// writes it as the JVM exits, later runs map the classes from it instead of loading them
// from ~130 jars. It is keyed by the Java build and the classpath.
var cli struct {
	sync.Mutex
	archive  string // "" = none (RIG_CDS=0, or no cache)
	training bool   // a run is writing it
	checked  bool
}

// cliArchive returns the archive path and whether this run is to write it.
func cliArchive(cp string) (string, bool) {
	cli.Lock()
	defer cli.Unlock()
	if !cli.checked {
		cli.checked = true
		c, err := cacheDir()
		jv, jerr := exec.Command("java", "-version").CombinedOutput()
		if err == nil && jerr == nil && os.Getenv("RIG_CDS") != "0" {
			h := fnv.New64a()
			h.Write(jv)
			h.Write([]byte(cp))
			cli.archive = filepath.Join(c, "cds", fmt.Sprintf("admin-cli-%x.jsa", h.Sum64()))
		}
	}
	if cli.archive == "" {
		return "", false
	}
	if _, err := os.Stat(cli.archive); err == nil {
		return cli.archive, false
	}
	if cli.training {
		return "", false // another run is writing it: this one goes without
	}
	if os.MkdirAll(filepath.Dir(cli.archive), 0o755) != nil {
		return "", false
	}
	cli.training = true
	return cli.archive, true
}

// cliTrained keeps the archive a run wrote when it exited cleanly.
func cliTrained(archive string, ok bool) {
	cli.Lock()
	defer cli.Unlock()
	cli.training = false
	tmp := trainingFile(archive)
	if st, err := os.Stat(tmp); ok && err == nil && st.Size() > 0 {
		os.Rename(tmp, archive)
		return
	}
	os.Remove(tmp)
}

// trainingFile is where this process's CLI writes archive before it is kept: a name of its
// own, since test packages run side by side (test/run-e2e.sh) may train at the same time.
func trainingFile(archive string) string { return fmt.Sprintf("%s.%d.tmp", archive, os.Getpid()) }
