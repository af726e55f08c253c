package convert

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/cmdline"
)

// Exit codes of convert-config (documented in docs/migrating.md and in the command's usage).
const (
	ExitOK         = 0                 // written, and check-config passes it where the conversion ran
	ExitFailed     = 1                 // proxy.conf could not be read, or the output not written
	ExitUsage      = cmdline.ExitUsage // bad command line
	ExitNeedsInput = 3                 // written, but check-config would refuse it: the report says what it needs
)

// Usage is convert-config's help text, with its exit codes.
const Usage = `usage: pulsar-proxy convert-config [-o FILE] PROXY_CONF

Reads an Apache Pulsar proxy.conf (PROXY_CONF, or - for standard input) and writes the
equivalent pulsar-proxy config.yaml to standard output (or FILE). The report goes to standard
error: every setting carried over and where it went, every setting that could not be, with
the reason, and those to review (they change behaviour or need your hand).

Brokers are found as Apache's proxy finds them: brokerServiceURL (or brokerServiceURLTLS)
becomes discovery.static, and metadataStoreUrl (or zookeeperServers) becomes
discovery.metadataStore, which follows the brokers registered in ZooKeeper.

With -o FILE, keys that pulsar-proxy cannot read as they are get converted beside FILE: a DER
tokenPublicKey (as Pulsar writes it) as a PEM file, an inline tokenSecretKey or tokenPublicKey
as a file; the config names the new files and the report lists them. Without -o, such a key is
an error that names the fix.

The written file is checked as ` + "`pulsar-proxy check-config FILE`" + ` would check it here: anything
check-config would refuse, a file it names that is missing or unreadable here included, makes
the conversion exit 3.

exit codes:
  0  written, and check-config passes it here
  1  PROXY_CONF could not be read, or FILE not written
  2  bad command line
  3  written, but not ready yet (e.g. no discovery, a key to convert, a file missing here):
     the report lists what it needs
`

// Main runs convert-config with args (those after the subcommand's name) and returns the exit
// code; --help prints Usage on stdout.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("convert-config", flag.ContinueOnError)
	out := fs.String("o", "", "")
	files, code, ok := cmdline.Parse(fs, args, Usage, stdout, stderr)
	if !ok {
		return code
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
	var opts Options
	if *out != "" {
		opts.WriteDir = filepath.Dir(*out)
	}
	res, err := ConvertWith(in, name, opts)
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
