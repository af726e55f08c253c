package main

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// writeOCILayout writes img as the only image of a fresh OCI image layout in dir (for skopeo,
// crane, podman, containerd), its ref.name annotation the tag.
func writeOCILayout(dir, tag string, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}

// writeOCIIndexLayout writes idx as the only manifest of a fresh OCI image layout in dir, its
// ref.name annotation the tag, as `skopeo copy --all` and `crane push --index` read it.
func writeOCIIndexLayout(dir, tag string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}

// writeOCIArchive writes the layout in dir as one tar file (the oci-archive transport's
// format): its files in lexical order, owned by root, all times mtime, so that the same
// layout gives the same bytes.
func writeOCIArchive(dir, file string, mtime time.Time) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Typeflag: tar.TypeReg}
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(body)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeDockerArchive writes img as a `docker load` tarball tagged pulsar-proxy:tag.
func writeDockerArchive(file, tag string, img v1.Image) error {
	ref, err := name.NewTag("pulsar-proxy:"+tag, name.WeakValidation)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(file, ref, img)
}

// tagOf turns a version (e.g. git describe output) into a valid image tag.
func tagOf(version string) string {
	t := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(version, "-")
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}
