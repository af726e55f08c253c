package main

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// platformOf is the platform of the image for a GOARCH; arm64 names its variant, v8, as
// registries and runtimes expect of linux/arm64 images.
func platformOf(arch string) *v1.Platform {
	p := &v1.Platform{OS: "linux", Architecture: arch}
	if arch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// imageIndex is an OCI image index of imgs, each described with its platform (arches[i]), so
// that a runtime pulling the index takes the image of its own architecture.
func imageIndex(imgs []v1.Image, arches []string) v1.ImageIndex {
	adds := make([]mutate.IndexAddendum, len(imgs))
	for i, img := range imgs {
		adds[i] = mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: platformOf(arches[i])}}
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
}
