// Command image builds the pulsar-proxy container image without a container daemon: an OCI
// image layout (and for one architecture a `docker load` tarball), FROM scratch, with one
// layer holding the static binary and the default config. With several architectures
// (`make release`: amd64 and arm64) the layout holds an image index of one image per
// architecture. The Dockerfile at the repository root builds the same image for operators
// who have Docker; `make image` and `make release` run this.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// options say what to build and where.
type options struct {
	repo   string   // repository root
	out    string   // output folder: oci/ and, for one architecture, pulsar-proxy.tar
	arches []string // GOARCH of each image; more than one makes an index
	// binaries are prebuilt binaries by GOARCH (make release passes its own, so that the
	// image holds the very files its checksums name); the others are built here.
	binaries map[string]string
	// ociArchive, when set, is a file that gets the OCI layout as one tar (for skopeo's and
	// podman's oci-archive: transport, and for a release's downloads).
	ociArchive string
	meta       // arch is set per image
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(2)
	}
	start := time.Now()
	res, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: pulsar-proxy:%s %s in %s\n", tagOf(o.version), res.digest, time.Since(start).Round(100*time.Millisecond))
	for _, p := range res.platforms {
		fmt.Printf("  %-16s %s\n", p.platform, p.digest)
	}
	fmt.Printf("  OCI layout:     %s\n", filepath.Join(o.out, "oci"))
	if len(o.arches) == 1 {
		fmt.Printf("  docker archive: %s\n", filepath.Join(o.out, "pulsar-proxy.tar"))
	}
	if o.ociArchive != "" {
		fmt.Printf("  OCI archive:    %s\n", o.ociArchive)
	}
}

// parseFlags reads the command line into options.
func parseFlags(args []string) (options, error) {
	o := options{binaries: map[string]string{}}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var created, arches string
	fs.StringVar(&o.repo, "repo", ".", "repository root")
	fs.StringVar(&o.out, "out", "bin/image", "output folder (gets oci/ and, for one architecture, pulsar-proxy.tar)")
	fs.StringVar(&o.version, "version", "dev", "version stamped into the binary and the labels")
	fs.StringVar(&o.revision, "revision", "", "git commit for the revision label")
	fs.StringVar(&created, "created", "", "creation time, RFC 3339 (default: now); the commit time makes builds reproducible")
	fs.StringVar(&arches, "arch", runtime.GOARCH, "GOARCH of the image, or a comma-separated list for a multi-architecture index")
	fs.StringVar(&o.ociArchive, "oci-archive", "", "also write the OCI layout as one tar file here")
	fs.Func("binary", "ARCH=FILE: use this prebuilt linux binary for ARCH instead of building one (repeatable)", func(v string) error {
		arch, file, ok := strings.Cut(v, "=")
		if !ok || arch == "" || file == "" {
			return fmt.Errorf("want ARCH=FILE, got %q", v)
		}
		o.binaries[arch] = file
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.arches = strings.Split(arches, ",")
	for a := range o.binaries {
		if !slices.Contains(o.arches, a) {
			return o, fmt.Errorf("-binary names %s, which -arch %s does not", a, arches)
		}
	}
	o.created = time.Now().UTC().Truncate(time.Second)
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return o, fmt.Errorf("-created: %w", err)
		}
		o.created = t.UTC()
	}
	return o, nil
}
