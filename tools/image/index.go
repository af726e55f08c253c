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
		adds[i] = mutate.IndexAddendum{Add: plainImage{img}, Descriptor: v1.Descriptor{Platform: platformOf(arches[i])}}
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
}

// plainImage is an image whose index entry is a plain image descriptor: the library would
// also set artifactType (to the config's media type), a field meant for artifacts that
// multi-platform images built by Docker do not carry.
type plainImage struct{ v1.Image }

// Descriptor is what the index says of the image (the platform is added by the index).
func (p plainImage) Descriptor() (*v1.Descriptor, error) {
	mt, err := p.MediaType()
	if err != nil {
		return nil, err
	}
	size, err := p.Size()
	if err != nil {
		return nil, err
	}
	digest, err := p.Digest()
	return &v1.Descriptor{MediaType: mt, Size: size, Digest: digest}, err
}
