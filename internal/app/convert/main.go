package convert

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit codes of convert-config (documented in the README and in the command's usage).
const (
	ExitOK         = 0 // written, and it validates
	ExitFailed     = 1 // proxy.conf could not be read, or the output not written
	ExitUsage      = 2 // bad command line
	ExitNeedsInput = 3 // written, but it does not validate yet: the report says what it needs
)

// Usage is convert-config's help text, with its exit codes.
const Usage = `usage: pulsar-proxy convert-config [-o FILE] PROXY_CONF

Reads an Apache Pulsar proxy.conf (PROXY_CONF, or - for standard input) and writes the
equivalent pulsar-proxy config.yaml to standard output (or FILE). The report goes to standard
error: every setting carried over and where it went, every setting that could not be, with
the reason, and those to review (they change behaviour or need your hand).

exit codes:
  0  written, and the configuration validates
  1  PROXY_CONF could not be read, or FILE not written
  2  bad command line
  3  written, but it does not validate yet (e.g. no discovery: Apache's metadata store
     discovery has no counterpart); the report lists what it needs
`

// Main runs convert-config with args (those after the subcommand's name) and returns the exit
// code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("convert-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, Usage) }
	out := fs.String("o", "", "")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	var files []string
	for fs.NArg() > 0 {
		files = append(files, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return ExitUsage
		}
	}
	if len(files) != 1 {
		fmt.Fprint(stderr, Usage)
		return ExitUsage
	}
	name := files[0]
	in := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "convert-config:", err)
			return ExitFailed
		}
		defer f.Close()
		in = f
	} else {
		name = "standard input"
	}
	res, err := Convert(in, name)
	if err != nil {
		fmt.Fprintln(stderr, "convert-config:", err)
		return ExitFailed
	}
	if *out == "" {
		stdout.Write(res.YAML)
	} else if err := os.WriteFile(*out, res.YAML, 0o600); err != nil {
		fmt.Fprintln(stderr, "convert-config:", err)
		return ExitFailed
	}
	res.WriteReport(stderr, name)
	if !res.Valid() {
		return ExitNeedsInput
	}
	return ExitOK
}
