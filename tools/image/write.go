package main

import (
	"os"
	"regexp"

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
