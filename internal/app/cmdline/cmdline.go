// Package cmdline reads a command line of flags and operands, in any order, one way for the
// proxy and each of its subcommands: --help (or -h) prints the command's usage on standard
// output and ends it with 0; a flag it does not know prints the error and the usage on
// standard error and ends it with ExitUsage.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ExitUsage is the exit code of a bad command line, for every command of pulsar-proxy.
const ExitUsage = 2

// Parse parses args with fs (which must be flag.ContinueOnError), flags before or after the
// operands, and returns the operands. When the command should end instead (help was asked
// for, or a flag is bad) ok is false and code is its exit code.
func Parse(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (operands []string, code int, ok bool) {
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, where the output depends on why
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, usage)
				return nil, 0, false
			}
			fmt.Fprint(stderr, usage)
			return nil, ExitUsage, false
		}
		if fs.NArg() == 0 {
			return operands, 0, true
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
