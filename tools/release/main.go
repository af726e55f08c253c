// Command release is `make release`: the proxy's static binaries for each platform, a
// CycloneDX SBOM of each (from the module list the go command recorded in the binary), the
// multi-architecture image (tools/image, with these very linux binaries), and SHA256SUMS
// over every file of the release. The outputs go to one folder, bin/release by default.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// options say what to release and where.
type options struct {
	repo      string     // repository root
	out       string     // output folder, emptied first
	version   string     // stamped into the binaries, the file names and the image tag
	revision  string     // git commit, for the image's label
	created   string     // the commit's time, RFC 3339, for the image
	platforms []platform // binaries to build
	image     bool       // also build the image of the linux platforms
}

// defaultPlatforms are the release's binaries.
const defaultPlatforms = "linux/amd64,linux/arm64,darwin/arm64"

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	}
	start := time.Now()
	files, err := release(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	fmt.Printf("release %s in %s (%s):\n", o.version, time.Since(start).Round(100*time.Millisecond), o.out)
	for _, f := range files {
		fmt.Printf("  %10d  %s\n", f.size, f.name)
	}
}

// parseFlags reads the command line into options.
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var platforms string
	fs.StringVar(&o.repo, "repo", "../..", "repository root")
	fs.StringVar(&o.out, "out", "", "output folder (emptied first), e.g. bin/release")
	fs.StringVar(&o.version, "version", "", "the release's version, e.g. v1.2.0 (git describe --tags)")
	fs.StringVar(&o.revision, "revision", "", "git commit, for the image's revision label")
	fs.StringVar(&o.created, "created", "", "the commit's time, RFC 3339, for the image (the same commit gives the same image)")
	fs.StringVar(&platforms, "platforms", defaultPlatforms, "GOOS/GOARCH of each binary, comma-separated")
	fs.BoolVar(&o.image, "image", true, "also build the multi-architecture image of the linux binaries (tools/image)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.out == "" || o.version == "" {
		return o, fmt.Errorf("-out and -version are required")
	}
	for _, p := range strings.Split(platforms, ",") {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos == "" || goarch == "" {
			return o, fmt.Errorf("-platforms: %q is not GOOS/GOARCH", p)
		}
		o.platforms = append(o.platforms, platform{goos, goarch})
	}
	var err error
	if o.repo, err = filepath.Abs(o.repo); err != nil {
		return o, err
	}
	o.out, err = filepath.Abs(o.out)
	return o, err
}
