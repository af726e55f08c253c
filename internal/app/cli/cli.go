// Package cli is pulsar-proxy's command line: the subcommands (check-config, convert-config,
// help), the proxy's own flags, and the refusal of what it does not know, with what was
// probably meant. cmd/pulsar-proxy hands it the process (arguments, environment, standard
// streams) and the function that runs the proxy until a signal; what it returns is the exit
// code.
package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/agnivade/levenshtein"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/cmdline"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/convert"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

// Exit codes of the proxy itself (the subcommands document their own).
const (
	ExitOK     = 0                 // stopped on a signal, drained
	ExitFailed = 1                 // a part could not start, or a listener failed
	ExitUsage  = cmdline.ExitUsage // a bad command line or configuration
)

// Usage is the proxy's help text.
const Usage = `pulsar-proxy: a gateway in front of Apache Pulsar brokers (the Pulsar binary protocol and
the admin API).

usage:
  pulsar-proxy [--config FILE]              run the proxy
  pulsar-proxy check-config [--connect] FILE
                                            check FILE as the proxy would load it: errors,
                                            warnings, the files it names, and (--connect) the
                                            brokers discovery finds
  pulsar-proxy convert-config [-o FILE] PROXY_CONF
                                            convert an Apache Pulsar proxy.conf to config.yaml
  pulsar-proxy help [COMMAND]               this help, or a command's (also COMMAND --help)

flags:
  --config FILE  the YAML configuration (config.example.yaml documents every key); every
                 setting can also be set, over FILE, by a PULSAR_PROXY_* variable
                 (broker.dialTimeout: PULSAR_PROXY_BROKER_DIAL_TIMEOUT)
  --version      print the version and exit
  --help         print this help and exit

exit codes:
  0  stopped on SIGINT or SIGTERM, after draining
  1  a part could not start, or a listener failed
  2  bad command line, or the configuration is refused
`

// Options are what the process gives Main.
type Options struct {
	Version        string
	Environ        []string // os.Environ()
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Run serves the proxy of cfg until the process is told to stop (cmd/pulsar-proxy: signals).
	Run func(cfg *config.Config) error
}

// commands are the subcommands and their help: the one list Main dispatches on, --help
// shows, and a mistyped command is matched against.
func commands() map[string]struct {
	usage string
	run   func(args []string, o Options) int
} {
	return map[string]struct {
		usage string
		run   func(args []string, o Options) int
	}{
		"check-config": {checkconfig.Usage, func(args []string, o Options) int {
			return checkconfig.Main(args, o.Environ, o.Stdout, o.Stderr, o.Version)
		}},
		"convert-config": {convert.Usage, func(args []string, o Options) int {
			return convert.Main(args, o.Stdin, o.Stdout, o.Stderr)
		}},
	}
}

// Main runs the command line args (those after the program's name) and returns the exit code.
func Main(args []string, o Options) int {
	if len(args) > 0 {
		if c, ok := commands()[args[0]]; ok {
			return c.run(args[1:], o)
		}
		if args[0] == "help" {
			return help(args[1:], o)
		}
	}
	fs := flag.NewFlagSet("pulsar-proxy", flag.ContinueOnError)
	path := fs.String("config", "", "")
	version := fs.Bool("version", false, "")
	stray, code, ok := cmdline.Parse(fs, args, Usage, o.Stdout, o.Stderr)
	switch {
	case !ok:
		return code
	case len(stray) > 0:
		fmt.Fprintln(o.Stderr, "pulsar-proxy:", strayError(stray, *path))
		return ExitUsage
	case *version:
		fmt.Fprintln(o.Stdout, "pulsar-proxy", o.Version)
		return ExitOK
	}
	cfg, err := config.Load(*path, o.Environ)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(o.Stderr, "pulsar-proxy:", line)
		}
		if *path == "" {
			fmt.Fprintln(o.Stderr, "pulsar-proxy: (no --config FILE: the settings came from the defaults and the PULSAR_PROXY_* variables alone)")
		}
		return ExitUsage
	}
	if err := o.Run(cfg); err != nil {
		fmt.Fprintln(o.Stderr, "pulsar-proxy:", err)
		return ExitFailed
	}
	return ExitOK
}

// help prints the help of the command named in args, or the proxy's.
func help(args []string, o Options) int {
	if len(args) == 0 {
		fmt.Fprint(o.Stdout, Usage)
		return ExitOK
	}
	if c, ok := commands()[args[0]]; ok && len(args) == 1 {
		fmt.Fprint(o.Stdout, c.usage)
		return ExitOK
	}
	fmt.Fprintf(o.Stderr, "pulsar-proxy help: no command %q%s\n", strings.Join(args, " "), nearCommand(args[0]))
	return ExitUsage
}

// strayError is the error of operands the proxy does not take: a mistyped command, or the
// configuration file without --config.
func strayError(stray []string, path string) string {
	if hint := nearCommand(stray[0]); hint != "" {
		return fmt.Sprintf("unknown command %q%s (pulsar-proxy --help lists them)", stray[0], hint)
	}
	quoted := fmt.Sprintf("%q", stray)
	what := "unexpected argument " + quoted[1:len(quoted)-1]
	if len(stray) > 1 {
		what = "unexpected arguments " + quoted[1:len(quoted)-1]
	}
	if path == "" && len(stray) == 1 {
		return fmt.Sprintf("%s: the configuration file is given with --config: pulsar-proxy --config %s", what, stray[0])
	}
	return what + ": pulsar-proxy takes only flags (pulsar-proxy --help)"
}

// nearCommand is "; did you mean COMMAND?" for the subcommand that name is probably a
// misspelling (at most two edits) or the start of; "" when none is near.
func nearCommand(name string) string {
	best, dist := "", 3
	for c := range commands() {
		d := levenshtein.ComputeDistance(name, c)
		if len(name) >= 3 && strings.HasPrefix(c, name) {
			d = 1
		}
		if d < dist || d == dist && c < best {
			best, dist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}
