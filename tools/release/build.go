package main

import (
	"fmt"
	"os"
	"os/exec"
)

// buildFlags and ldflags are the release binaries' (and the image's: tools/image/spec.go has
// the same): static (CGO_ENABLED=0), no local paths, no symbol table, the version stamped.
var buildFlags = []string{"-trimpath"}

func ldflags(version string) string { return "-s -w -X main.version=" + version }

// buildBinary compiles cmd/pulsar-proxy of the repository at repo into out for p.
func buildBinary(repo, version string, p platform, out string) error {
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-ldflags", ldflags(version), "-o", out, "./cmd/pulsar-proxy")
	c := exec.Command("go", args...)
	c.Dir = repo
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.goos, "GOARCH="+p.goarch)
	if b, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}
