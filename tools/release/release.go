package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// platform is one binary's target.
type platform struct{ goos, goarch string }

func (p platform) String() string { return p.goos + "/" + p.goarch }

// fileName is the release's name for the binary of p: pulsar-proxy-v1.2.0-linux-amd64.
func fileName(version string, p platform) string {
	return "pulsar-proxy-" + safe(version) + "-" + p.goos + "-" + p.goarch
}

// safe is version with anything but letters, digits, '.', '_' and '-' replaced by '-', as
// file names and image tags allow (tools/image's tag is made the same way).
func safe(version string) string {
	return regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(version, "-")
}

// release builds everything into o.out and returns the release's files, the last one
// SHA256SUMS, which names all the others.
func release(o options) ([]file, error) {
	if err := emptyOut(o.out); err != nil {
		return nil, err
	}
	linux := map[string]string{} // GOARCH: binary, for the image
	for _, p := range o.platforms {
		bin := filepath.Join(o.out, fileName(o.version, p))
		if err := buildBinary(o.repo, o.version, p, bin); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if err := writeSBOM(o.repo, o.version, bin, bin+".cdx.json"); err != nil {
			return nil, fmt.Errorf("%s: SBOM: %w", p, err)
		}
		if p.goos == "linux" {
			linux[p.goarch] = bin
		}
	}
	if o.image && len(linux) > 0 {
		if err := buildImage(o, linux); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	return writeSums(o.out)
}

// emptyOut makes dir an empty folder. It removes only what a release writes (pulsar-proxy-*,
// image/, SHA256SUMS), so that a mistyped -out cannot delete anything else.
func emptyOut(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, e := range entries {
		if n := e.Name(); n != sumsFile && n != "image" && !strings.HasPrefix(n, "pulsar-proxy-") {
			return fmt.Errorf("%s holds %s, which no release writes: not emptying it", dir, n)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}
