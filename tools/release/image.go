package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// buildImage runs tools/image with the release's linux binaries (GOARCH: file): an OCI
// index of one image per architecture in out/image/oci, and the same layout as one tar,
// pulsar-proxy-VERSION-image.oci.tar, among the release's files.
func buildImage(o options, linux map[string]string) error {
	arches := make([]string, 0, len(linux))
	for a := range linux {
		arches = append(arches, a)
	}
	slices.Sort(arches)
	args := []string{"run", ".", "-repo", o.repo, "-out", filepath.Join(o.out, "image"),
		"-version", o.version, "-revision", o.revision, "-created", o.created,
		"-arch", strings.Join(arches, ","),
		"-oci-archive", filepath.Join(o.out, "pulsar-proxy-"+safe(o.version)+"-image.oci.tar")}
	for _, a := range arches {
		args = append(args, "-binary", a+"="+linux[a])
	}
	c := exec.Command("go", args...)
	c.Dir = filepath.Join(o.repo, "tools", "image")
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("tools/image: %w", err)
	}
	return nil
}
