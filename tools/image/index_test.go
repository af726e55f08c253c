package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestMultiArchIndex: with two architectures and prebuilt binaries (as make release passes
// them), the layout holds one tagged index of a linux/amd64 and a linux/arm64/v8 image, each
// config names its architecture and each layer holds the binary given for it; the OCI
// archive holds the same layout. A binary of the wrong architecture is refused.
func TestMultiArchIndex(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bins := map[string]string{}
	for arch, m := range elfMachines {
		bins[arch] = filepath.Join(dir, "pulsar-proxy-"+arch)
		if err := os.WriteFile(bins[arch], fakeELF(t, m, arch), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	o := options{repo: repo, out: filepath.Join(dir, "out"), arches: []string{"amd64", "arm64"}, binaries: bins,
		ociArchive: filepath.Join(dir, "image.oci.tar"), meta: meta{version: testVersion, created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	res, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("layout", func(t *testing.T) { checkIndexLayout(t, filepath.Join(o.out, "oci"), res.digest, bins) })
	t.Run("archive", func(t *testing.T) {
		unpacked := filepath.Join(dir, "unpacked")
		untar(t, o.ociArchive, unpacked)
		checkIndexLayout(t, unpacked, res.digest, bins)
	})
	t.Run("wrong architecture refused", func(t *testing.T) {
		o.binaries = map[string]string{"amd64": bins["arm64"], "arm64": bins["arm64"]}
		o.out, o.ociArchive = filepath.Join(dir, "wrong"), ""
		if _, err := build(o); err == nil || !strings.Contains(err.Error(), "EM_AARCH64") {
			t.Errorf("an arm64 binary for the amd64 image: %v, want a refusal naming EM_AARCH64", err)
		}
	})
}

// checkIndexLayout checks the layout in dir: one index, tagged testVersion, with digest, of
// an image for each architecture of bins holding that binary.
func checkIndexLayout(t *testing.T, dir, digest string, bins map[string]string) {
	t.Helper()
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIImageIndex || im.Manifests[0].Digest.String() != digest ||
		im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testVersion {
		t.Fatalf("index.json holds %+v, want the one index %s tagged %s", im.Manifests, digest, testVersion)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	iim, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range iim.Manifests {
		platforms = append(platforms, d.Platform.String())
		if d.MediaType != types.OCIManifestSchema1 || d.ArtifactType != "" {
			t.Errorf("%s: index entry %s, artifactType %q; want a plain OCI image manifest", d.Platform, d.MediaType, d.ArtifactType)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != d.Platform.Architecture || cf.Variant != d.Platform.Variant {
			t.Errorf("%s: config says %s/%s/%s", d.Platform, cf.OS, cf.Architecture, cf.Variant)
		}
		want, _ := os.ReadFile(bins[d.Platform.Architecture])
		if got := fileIn(t, img, binaryPath); !bytes.Equal(got, want) {
			t.Errorf("%s: %s is not the binary given for %s", d.Platform, binaryPath, d.Platform.Architecture)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64/v8"}; !slices.Equal(platforms, want) {
		t.Errorf("index platforms %q, want %q", platforms, want)
	}
}

// fakeELF is an ELF header of a 64-bit little-endian executable for machine m, then a line
// naming arch: enough for checkELF, and told apart by its bytes.
func fakeELF(t *testing.T, m elf.Machine, arch string) []byte {
	t.Helper()
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("not a real binary: " + arch + "\n")
	return buf.Bytes()
}

// fileIn is the content of the file at path in img's filesystem.
func fileIn(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the image: %v", path, err)
		}
		if "/"+h.Name == path {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// untar unpacks the tar file into dir.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			err = os.MkdirAll(dst, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(dst, b, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
