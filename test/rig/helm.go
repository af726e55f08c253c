package rig

import (
	"os"
)

// HelmBinary is the helm that build-helm.sh builds into the cache (`make helm`), or
// RIG_HELM_BIN. A missing one is a *PrereqError, for the caller to skip on (outside CI) or
// fail on.
func HelmBinary() (string, error) {
	bin := os.Getenv("RIG_HELM_BIN")
	if bin == "" {
		var err error
		if bin, err = inCache("helm-", "HELM_VERSION"); err != nil {
			return "", err
		}
	}
	if !fileExists(bin) {
		return "", &PrereqError{Reason: "no helm at " + bin + " (`make helm` builds it: test/rig/build-helm.sh)"}
	}
	return bin, nil
}
