package checkconfig

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/cmdline"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/proxy"
)

// Usage is check-config's help text, with its exit codes.
const Usage = `usage: pulsar-proxy check-config [--connect] [--connect-timeout 20s] [--quiet] FILE

Loads FILE as the proxy would (the PULSAR_PROXY_* environment applied), runs every validation,
checks that the certificates, keys, token files, CA bundles and the authorization policy it
names exist and parse as the proxy reads them (and that certificates and the proxy's broker
token have not expired; within 14 days is a warning), then prints the effective configuration
with secrets redacted on standard output. The findings go to standard error.

  --connect   also run discovery and complete a CONNECT with every broker it names (at most
              16), as the proxy's own connections do (broker TLS, credentials)
  --quiet     do not print the effective configuration

exit codes:
  0  valid (warnings allowed)
  1  the configuration is refused, or a file it names is missing, unreadable or expired
  2  bad command line
  3  --connect: valid, but discovery named no broker or no broker completed a CONNECT
`

// Main runs check-config with args (those after the subcommand's name) and returns the exit
// code; version is the proxy's, which --connect's CONNECTs carry as the proxy's do. Flags may
// come before or after FILE; --help prints Usage on stdout.
func Main(args, environ []string, stdout, stderr io.Writer, version string) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	connect := fs.Bool("connect", false, "")
	timeout := fs.Duration("connect-timeout", 20*time.Second, "")
	quiet := fs.Bool("quiet", false, "")
	files, code, ok := cmdline.Parse(fs, args, Usage, stdout, stderr)
	if !ok {
		return code
	}
	if len(files) != 1 || *timeout <= 0 {
		fmt.Fprintln(stderr, errNoFile)
		fmt.Fprint(stderr, Usage)
		return ExitUsage
	}
	file := files[0]

	r := Check(file, environ, time.Now())
	code = ExitOK
	if r.Failed() {
		code = ExitInvalid
	} else if *connect {
		code = runConnect(r, version, *timeout)
	}
	r.Write(stderr)
	if r.Config != nil && !*quiet {
		y, err := Redacted(r.Config)
		if err != nil {
			fmt.Fprintf(stderr, "error   config: printing it: %v\n", err)
			return ExitInvalid
		}
		fmt.Fprintf(stdout, "# The effective configuration of %s (environment applied, secrets redacted).\n", file)
		stdout.Write(y)
	}
	fmt.Fprintln(stderr, summary(r, code))
	return code
}

// runConnect is --connect: the proxy's discovery and broker CONNECT, built as the proxy builds
// them (logs off: the report says what they saw), exercised by Connect. It returns the exit
// code.
func runConnect(r *Report, version string, timeout time.Duration) int {
	probe, err := proxy.NewProbe(r.Config, version, zerolog.Nop())
	if err != nil {
		r.add(Error, "config", "%v", err)
		return ExitInvalid
	}
	if !Connect(context.Background(), probe, timeout, r) {
		return ExitConnection
	}
	return ExitOK
}

func summary(r *Report, code int) string {
	var errs, warns int
	for _, f := range r.Findings {
		switch f.Severity {
		case Error:
			errs++
		case Warning:
			warns++
		}
	}
	what := map[int]string{ExitOK: "valid", ExitInvalid: "invalid", ExitConnection: "valid, but --connect failed"}[code]
	return fmt.Sprintf("check-config: %s (%d error(s), %d warning(s)); exit %d", what, errs, warns, code)
}
