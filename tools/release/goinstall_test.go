package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// modulePath is the product's module path, the one operators `go install`.
const modulePath = "github.com/pulsar-proxy/pulsar-proxy"

// TestGoInstall: `go install github.com/pulsar-proxy/pulsar-proxy/cmd/pulsar-proxy@VERSION`,
// as docs/install.md gives it, works from the module as the module proxy would serve it
// for a tag on this commit (a module zip made from git HEAD, as the proxy makes it from the
// tag), and the binary reports that version. go install refuses a module with replace or
// exclude directives, and one whose zip would break the rules of module zips; both would
// fail here. The module's dependencies come from the local module cache, used as a file
// proxy: no network.
func TestGoInstall(t *testing.T) {
	const version = "v1.99.0-installtest"
	tmp := t.TempDir()
	proxyDir := filepath.Join(tmp, "proxy")
	serveModule(t, proxyDir, version)

	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	gobin := filepath.Join(tmp, "bin")
	c := exec.Command("go", "install", modulePath+"/cmd/pulsar-proxy@"+version)
	c.Dir = tmp // outside any module
	c.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxyDir)+",file://"+filepath.ToSlash(filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download")),
		"GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=", "GOTOOLCHAIN=local", "GO111MODULE=on",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"), "GOBIN="+gobin, "GOWORK=off",
		// -trimpath only so that the build cache's compiled dependencies (make release's, the
		// image test's) serve this build from a new module cache; it changes no resolution.
		"GOFLAGS=-modcacherw -trimpath")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/pulsar-proxy@%s: %v\n%s", modulePath, version, err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "pulsar-proxy"), "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "pulsar-proxy "+version {
		t.Errorf("the installed binary's --version: %q, %v; want %q", out, err, "pulsar-proxy "+version)
	}
}

// serveModule lays out the product's module at version in dir as a GOPROXY=file:// folder:
// the zip of git HEAD's tree (zip.CreateFromDir leaves out the nested modules and checks
// the zip rules, as the proxy does), HEAD's go.mod, the info.
func serveModule(t *testing.T, dir, version string) {
	t.Helper()
	repo := repoRoot(t)
	at := filepath.Join(dir, modulePath, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	z, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	// HEAD's tree, as git archive gives it (zip.CreateFromVCS would do the same, but it
	// does not recognise a git worktree's .git file).
	work := t.TempDir()
	src, tarball := filepath.Join(work, "src"), filepath.Join(work, "head.tar")
	for _, args := range [][]string{{"git", "-C", repo, "archive", "--format=tar", "-o", tarball, "HEAD"}, {"mkdir", src}, {"tar", "-xf", tarball, "-C", src}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
	}
	if err := zip.CreateFromDir(z, module.Version{Path: modulePath, Version: version}, src); err != nil {
		t.Fatalf("module zip of HEAD: %v", err)
	}
	gomod, err := exec.Command("git", "-C", repo, "show", "HEAD:go.mod").Output()
	if err != nil {
		t.Fatalf("git show HEAD:go.mod: %v", err)
	}
	info, err := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{version + ".mod": gomod, version + ".info": info, "list": []byte(version + "\n")} {
		if err := os.WriteFile(filepath.Join(at, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
