package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/convert"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

// result is one run of Main: its exit code, what it printed, and the configuration the proxy
// would have run with (nil: it did not run).
type result struct {
	code           int
	stdout, stderr string
	ran            *config.Config
}

func runMain(t *testing.T, environ []string, runErr error, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	var ran *config.Config
	code := Main(args, Options{Version: "9.9.9", Environ: environ, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		Run: func(cfg *config.Config) error { ran = cfg; return runErr }})
	return result{code, out.String(), errOut.String(), ran}
}

func writeConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("discovery: {static: {brokers: [\"pulsar://b:6650\"]}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHelp: --help (and -h, help) lists the subcommands with a line each, on standard output,
// exit 0; each subcommand has its own --help, and help COMMAND prints the same.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--config", "x.yaml", "--help"}} {
		r := runMain(t, nil, nil, args...)
		if r.code != 0 || r.stdout != Usage || r.stderr != "" || r.ran != nil {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	for name := range commands() {
		if !strings.Contains(Usage, "\n  pulsar-proxy "+name+" ") {
			t.Errorf("--help does not list %s:\n%s", name, Usage)
		}
	}
	for _, c := range []struct {
		name, usage string
	}{{"check-config", checkconfig.Usage}, {"convert-config", convert.Usage}} {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			r := runMain(t, nil, nil, args...)
			if r.code != 0 || r.stdout != c.usage || r.stderr != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
			}
		}
	}
	if r := runMain(t, nil, nil, "help", "check-confg"); r.code != ExitUsage || !strings.Contains(r.stderr, "did you mean check-config?") {
		t.Errorf("help of a misspelt command: exit %d, %q", r.code, r.stderr)
	}
}

// TestStrayArguments: the proxy takes flags only; an operand is an error (exit 2, as for a
// bad flag) that says what was probably meant, and the proxy does not start.
func TestStrayArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"config.yaml"}, `pulsar-proxy: unexpected argument "config.yaml": the configuration file is given with --config: pulsar-proxy --config config.yaml`},
		{[]string{"--config", "a.yaml", "b.yaml"}, `pulsar-proxy: unexpected argument "b.yaml": pulsar-proxy takes only flags`},
		{[]string{"a.yaml", "b.yaml"}, `pulsar-proxy: unexpected arguments "a.yaml" "b.yaml": pulsar-proxy takes only flags`},
		{[]string{"check-confg", "config.yaml"}, `pulsar-proxy: unknown command "check-confg"; did you mean check-config? (pulsar-proxy --help lists them)`},
		{[]string{"convert", "proxy.conf"}, `unknown command "convert"; did you mean convert-config?`},
		{[]string{"--confg", "config.yaml"}, "flag provided but not defined: -confg"},
	} {
		r := runMain(t, nil, nil, tc.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) || r.ran != nil {
			t.Errorf("%q: exit %d (want 2), ran %v, stderr:\n%s\nwant %q", tc.args, r.code, r.ran != nil, r.stderr, tc.want)
		}
	}
}

// TestRun: the proxy runs with the file and the environment applied; a refused configuration
// (here a misspelt variable) is exit 2 and a proxy that fails is exit 1.
func TestRun(t *testing.T) {
	path := writeConfig(t)
	r := runMain(t, []string{"PULSAR_PROXY_LOG_LEVEL=debug"}, nil, "--config", path)
	if r.code != ExitOK || r.ran == nil || r.ran.Log.Level != "debug" {
		t.Errorf("exit %d, ran %+v, stderr %q", r.code, r.ran, r.stderr)
	}
	r = runMain(t, []string{"PULSAR_PROXY_LOG_LEVL=debug"}, nil, "--config", path)
	if r.code != ExitUsage || r.ran != nil || !strings.Contains(r.stderr, "PULSAR_PROXY_LOG_LEVL: unknown variable; did you mean PULSAR_PROXY_LOG_LEVEL?") {
		t.Errorf("misspelt variable: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runMain(t, nil, errors.New("listen tcp :6650: address already in use"), "--config", path)
	if r.code != ExitFailed || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("a failing proxy: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runMain(t, nil, nil)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "no broker discovery configured") || !strings.Contains(r.stderr, "no --config FILE") {
		t.Errorf("no configuration at all: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runMain(t, nil, nil, "--version")
	if r.code != ExitOK || r.stdout != "pulsar-proxy 9.9.9\n" || r.ran != nil {
		t.Errorf("--version: exit %d, %q", r.code, r.stdout)
	}
}
