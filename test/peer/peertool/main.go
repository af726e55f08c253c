// Command peertool serves test/peer/peer.sh, the peer suite gate (pulsar-client-go's own
// tests run directly and through the proxy):
//
//	peertool relay  LISTEN=DIAL ...   forward each connection (tcp:HOST:PORT or unix:PATH each side)
//	peertool token  KEYFILE ROLE      an HS256 token for ROLE signed with the raw key in KEYFILE
//	peertool failed DIRECT.json PROXY.json  a -run pattern of the tests that passed directly and
//	                                  failed through the proxy ("" when none)
//	peertool remaining LIST RUN.json  a -run pattern of the tests in LIST that the run never
//	                                  started ("" when none: no test ended the binary early)
//	peertool report DIRECT.json PROXY.json PAGE.md [direct-rerun-N.json proxy-rerun-N.json...]
//	                                  compare two `go test -json` runs and the reruns of their
//	                                  differences in each mode; write the page; exit 1 when a test
//	                                  passed directly and its reruns say the proxy fails it
//	peertool logcheck LOG             the proxy's log held to the rules of every proxy's log in
//	                                  the e2e suites (test/proxyproc): one JSON object a line
//
// The relay is how the test process reaches the proxy from a network namespace of its own,
// where no broker can be reached: its listeners there dial unix sockets, which a relay in
// the proxy's namespace forwards to the proxy's ports (a socket file crosses namespaces).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "relay":
		err = relay(os.Args[2:])
	case "token":
		err = token(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	case "failed":
		err = failed(os.Args[2:])
	case "remaining":
		err = remaining(os.Args[2:])
	case "logcheck":
		err = logcheck(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peertool:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: peertool relay LISTEN=DIAL... | token KEYFILE ROLE | report DIRECT.json PROXY.json PAGE.md [RERUN.json...] | failed DIRECT.json PROXY.json | remaining LIST RUN.json | logcheck LOG")
	os.Exit(2)
}

// logcheck fails when the proxy's log breaks the rules every proxy's log is held to.
func logcheck(args []string) error {
	if len(args) != 1 {
		usage()
	}
	errs := proxyproc.CheckLog(args[0])
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, args[0]+":", err)
	}
	if len(errs) > 0 {
		return errors.New("the proxy's log breaks the log's rules (internal/jsonlog)")
	}
	return nil
}
