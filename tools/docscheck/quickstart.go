package docscheck

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// QuickStartAnchor is the README heading whose code blocks are the developer's quick start.
const QuickStartAnchor = "quick-start"

// shells are the info strings of a block of shell commands.
var shells = []string{"", "sh", "bash", "shell"}

// Commands are the shell commands of p's shell blocks under the heading with anchor: one per
// non-empty line, a trailing "# comment" removed.
func Commands(p *Page, anchor string) []string {
	var cmds []string
	for _, b := range p.Blocks {
		if !slices.Contains(b.Under, anchor) || !slices.Contains(shells, b.Info) {
			continue
		}
		for _, line := range strings.Split(b.Text, "\n") {
			if i := strings.Index(line, "#"); i >= 0 {
				line = line[:i]
			}
			if line = strings.Join(strings.Fields(line), " "); line != "" {
				cmds = append(cmds, line)
			}
		}
	}
	return cmds
}

// DryRun runs a make command as written, with -n: make reads the Makefile and prints what the
// target would run. An error names the command and make's words (no such target, a broken
// Makefile, a target that runs nothing); a command that is not make is an error too.
func DryRun(root, command string) error {
	args := strings.Fields(command)
	if len(args) < 2 || args[0] != "make" {
		return fmt.Errorf("%q: the quick start's commands are make targets", command)
	}
	cmd := exec.Command("make", append([]string{"-n", "--no-print-directory", "-C", root}, args[1:]...)...)
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		return fmt.Errorf("%q (make -n): %v\n%s", command, err, out)
	case strings.Contains(string(out), "Nothing to be done") || strings.Contains(string(out), "is up to date"):
		// A target declared .PHONY but without a rule of its own plans nothing.
		return fmt.Errorf("%q (make -n): the target runs nothing:\n%s", command, out)
	}
	return nil
}

// FirstBlock is p's first code block of the language info, or nil.
func FirstBlock(p *Page, info string) *Block {
	for i := range p.Blocks {
		if p.Blocks[i].Info == info {
			return &p.Blocks[i]
		}
	}
	return nil
}

// CheckConfig runs `pulsar-proxy check-config` (the binary at bin) on a configuration's text,
// with no PULSAR_PROXY_ variable from the caller's environment; an error holds its output.
func CheckConfig(bin, config string) error {
	dir, err := os.MkdirTemp("", "docscheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(bin, "check-config", "--quiet", file)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULSAR_PROXY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("check-config: %v\n%s", err, out)
	}
	return nil
}

// BuildProxy builds the product's binary from the checkout at root into dir.
func BuildProxy(root, dir string) (string, error) {
	bin := filepath.Join(dir, "pulsar-proxy")
	out, err := exec.Command("go", "build", "-C", root, "-o", bin, "./cmd/pulsar-proxy").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/pulsar-proxy: %v\n%s", err, out)
	}
	return bin, nil
}
