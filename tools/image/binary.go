package main

import (
	"fmt"
	"os"
	"os/exec"
)

// buildBinary compiles cmd/pulsar-proxy of the repository at repo into out: statically linked
// for linux/arch, with the version stamped in.
func buildBinary(repo, version, arch, out string) error {
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-ldflags", ldflags(version), "-o", out, "./cmd/pulsar-proxy")
	c := exec.Command("go", args...)
	c.Dir = repo
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}
