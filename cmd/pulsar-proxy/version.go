package main

import "runtime/debug"

// version is stamped by the release builds (make release, make image, the Dockerfile) with
// -ldflags "-X main.version=..."; empty in any other build.
var version string

// binaryVersion is what --version prints and CONNECTs carry (proxy_version).
func binaryVersion() string {
	info, ok := debug.ReadBuildInfo()
	return pickVersion(version, info, ok)
}

// pickVersion is the stamped version, else the module's version the go command recorded
// (v1.2.0 after `go install .../cmd/pulsar-proxy@v1.2.0`), else "dev" (a build from a
// checkout without version control information).
func pickVersion(stamped string, info *debug.BuildInfo, ok bool) string {
	if stamped != "" {
		return stamped
	}
	if ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
