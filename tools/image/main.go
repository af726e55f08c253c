// Command image builds the pulsar-proxy container image without a container daemon: an OCI
// image layout and a `docker load` tarball, FROM scratch, with one layer holding the static
// binary and the default config. The Dockerfile at the repository root builds the same image
// for operators who have Docker; `make image` runs this.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// options say what to build and where.
type options struct {
	repo string // repository root
	out  string // output folder: oci/ and pulsar-proxy.tar
	meta
}

func main() {
	var o options
	var created string
	flag.StringVar(&o.repo, "repo", ".", "repository root")
	flag.StringVar(&o.out, "out", "bin/image", "output folder (gets oci/ and pulsar-proxy.tar)")
	flag.StringVar(&o.version, "version", "dev", "version stamped into the binary and the labels")
	flag.StringVar(&o.revision, "revision", "", "git commit for the revision label")
	flag.StringVar(&created, "created", "", "creation time, RFC 3339 (default: now); the commit time makes builds reproducible")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the image")
	flag.Parse()
	o.created = time.Now().UTC().Truncate(time.Second)
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			fmt.Fprintln(os.Stderr, "image: -created:", err)
			os.Exit(2)
		}
		o.created = t.UTC()
	}
	start := time.Now()
	digest, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: pulsar-proxy:%s %s in %s\n  OCI layout:     %s\n  docker archive: %s\n",
		tagOf(o.version), digest, time.Since(start).Round(100*time.Millisecond),
		filepath.Join(o.out, "oci"), filepath.Join(o.out, "pulsar-proxy.tar"))
}

// build compiles the binary, assembles the image and writes both outputs; it returns the
// image's manifest digest.
func build(o options) (string, error) {
	tmp, err := os.MkdirTemp("", "pulsar-proxy-image")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	binFile := filepath.Join(tmp, "pulsar-proxy")
	if err := buildBinary(o.repo, o.version, o.arch, binFile); err != nil {
		return "", err
	}
	binary, err := os.ReadFile(binFile)
	if err != nil {
		return "", err
	}
	config, err := os.ReadFile(filepath.Join(o.repo, configSource))
	if err != nil {
		return "", err
	}
	img, err := buildImage(binary, config, o.meta)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return "", err
	}
	tag := tagOf(o.version)
	if err := writeOCILayout(filepath.Join(o.out, "oci"), tag, img); err != nil {
		return "", fmt.Errorf("OCI layout: %w", err)
	}
	if err := writeDockerArchive(filepath.Join(o.out, "pulsar-proxy.tar"), tag, img); err != nil {
		return "", fmt.Errorf("docker archive: %w", err)
	}
	d, err := img.Digest()
	return d.String(), err
}
