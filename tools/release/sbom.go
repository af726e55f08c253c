package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// writeSBOM writes the CycloneDX SBOM (JSON) of the binary bin to out with cyclonedx-gomod,
// pinned as a tool of this module: the main module and every module the go command
// recorded in the binary (`go version -m`), with their hashes, the build settings and the
// binary's own hashes. No serial number and no time stamp, so that the same binary gives the
// same SBOM. (Its license detection would download the main module at this version from
// the module proxy, which an unpublished release cannot do; it stays off.)
func writeSBOM(repo, version, bin, out string) error {
	c := exec.Command("go", "tool", "cyclonedx-gomod", "bin", "-json", "-noserial", "-notimestamp",
		"-version", version, "-output", out, bin)
	c.Dir = filepath.Join(repo, "tools", "release")
	if b, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("cyclonedx-gomod: %v\n%s", err, b)
	}
	return nil
}
