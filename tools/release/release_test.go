package main

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const testVersion = "v9.9.9-releasetest"

// repoRoot is the repository's root, from this module's folder.
func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReleaseHostBinary: the release of the host's platform (the binary of an operator's
// first day): a static executable without local paths and with its version stamped, an SBOM
// naming every module the binary records, and SHA256SUMS that `sha256sum -c` accepts.
func TestReleaseHostBinary(t *testing.T) {
	host := platform{runtime.GOOS, runtime.GOARCH}
	o := options{repo: repoRoot(t), out: filepath.Join(t.TempDir(), "release"), version: testVersion, platforms: []platform{host}}
	files, err := release(o)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(o.out, fileName(testVersion, host))
	var names []string
	for _, f := range files {
		names = append(names, f.name)
	}
	if want := []string{filepath.Base(bin), filepath.Base(bin) + ".cdx.json", sumsFile}; !slices.Equal(names, want) {
		t.Fatalf("release files %q, want %q", names, want)
	}
	t.Run("checksums", func(t *testing.T) { checkSums(t, o.out, names[:2]) })
	t.Run("static, trimmed, stamped", func(t *testing.T) { checkBinary(t, bin) })
	t.Run("SBOM", func(t *testing.T) { checkSBOM(t, bin, bin+".cdx.json") })
}

// checkSums runs `sha256sum -c SHA256SUMS` in dir, as docs/install.md tells operators to,
// and checks that it verified exactly names.
func checkSums(t *testing.T, dir string, names []string) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		needTool(t, "sha256sum (coreutils)", err)
	}
	c := exec.Command("sha256sum", "-c", sumsFile)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	var ok []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if name, found := strings.CutSuffix(line, ": OK"); found {
			ok = append(ok, name)
		}
	}
	if slices.Sort(ok); !slices.Equal(ok, names) {
		t.Errorf("sha256sum -c verified %q, want %q:\n%s", ok, names, out)
	}
}

// checkBinary: the build settings the go command recorded (no cgo, -trimpath; with
// -trimpath it leaves -ldflags out), no ELF interpreter (statically linked), and --version
// prints the stamped version.
func checkBinary(t *testing.T, bin string) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v, want CGO_ENABLED=0 and -trimpath=true", settings)
	}
	if runtime.GOOS == "linux" {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: dynamically linked", bin)
			}
		}
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "pulsar-proxy "+testVersion {
		t.Errorf("--version: %q, %v; want %q", out, err, "pulsar-proxy "+testVersion)
	}
}

// cdx is the part of a CycloneDX document the test reads.
type cdx struct {
	BOMFormat   string `json:"bomFormat"`
	SpecVersion string `json:"specVersion"`
	Metadata    struct {
		Component struct {
			Name, Version, Purl string
		} `json:"component"`
	} `json:"metadata"`
	Components []struct {
		Name, Version, Purl string
		Hashes              []struct{ Alg, Content string }
	} `json:"components"`
}

// checkSBOM: a CycloneDX document whose main component is the proxy at the release's
// version and whose components are exactly the modules the binary records, each hashed.
func checkSBOM(t *testing.T, bin, sbom string) {
	b, err := os.ReadFile(sbom)
	if err != nil {
		t.Fatal(err)
	}
	var doc cdx
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	mc := doc.Metadata.Component
	if doc.BOMFormat != "CycloneDX" || mc.Name != info.Main.Path || mc.Version != testVersion || !strings.HasPrefix(mc.Purl, "pkg:golang/"+info.Main.Path+"@"+testVersion) {
		t.Errorf("SBOM %s %s, main component %+v; want CycloneDX naming %s@%s", doc.BOMFormat, doc.SpecVersion, mc, info.Main.Path, testVersion)
	}
	var want, got []string
	for _, d := range info.Deps {
		want = append(want, d.Path+"@"+d.Version)
	}
	for _, c := range doc.Components {
		got = append(got, c.Name+"@"+c.Version)
		if len(c.Hashes) == 0 {
			t.Errorf("component %s@%s has no hash", c.Name, c.Version)
		}
	}
	slices.Sort(want)
	if slices.Sort(got); len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("SBOM components %q,\nthe binary's modules %q", got, want)
	}
}

// needTool fails on CI and skips elsewhere when a tool the test runs is missing.
func needTool(t *testing.T, what string, err error) {
	t.Helper()
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("%s: %v (on CI nothing may be skipped)", what, err)
	}
	t.Skipf("%s: %v", what, err)
}
