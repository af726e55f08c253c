package cmdline

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const usage = "usage: cmd [-v] FILE...\n"
	for _, tc := range []struct {
		args           []string
		operands       []string
		code           int
		ok             bool
		stdout, stderr string // each must contain it ("" = must be empty)
	}{
		{args: []string{"a", "-v", "b"}, operands: []string{"a", "b"}, ok: true},
		{args: nil, operands: nil, ok: true},
		{args: []string{"--help"}, code: 0, stdout: usage},
		{args: []string{"a", "-h"}, code: 0, stdout: usage},
		{args: []string{"--nope", "a"}, code: ExitUsage, stderr: "flag provided but not defined: -nope\n" + usage},
	} {
		var out, errOut bytes.Buffer
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		v := fs.Bool("v", false, "")
		operands, code, ok := Parse(fs, tc.args, usage, &out, &errOut)
		if ok != tc.ok || code != tc.code || !slices.Equal(operands, tc.operands) {
			t.Errorf("%q: operands %q, code %d, ok %v", tc.args, operands, code, ok)
		}
		if ok && slices.Contains(tc.args, "-v") && !*v {
			t.Errorf("%q: -v not set", tc.args)
		}
		for _, c := range []struct{ got, want string }{{out.String(), tc.stdout}, {errOut.String(), tc.stderr}} {
			if (c.want == "") != (c.got == "") || !strings.Contains(c.got, c.want) {
				t.Errorf("%q: printed %q, want %q", tc.args, c.got, c.want)
			}
		}
	}
}
