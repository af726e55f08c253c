package main

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// result is what build wrote: the digest of the image (one architecture) or of the index,
// and each platform's image.
type result struct {
	digest    string
	platforms []platformImage
}

type platformImage struct {
	platform string // linux/amd64, linux/arm64/v8
	digest   string
}

// build assembles one image per architecture from its binary and the default config, and
// writes the outputs: for one architecture the image in an OCI layout and a docker archive,
// for several an index of them in an OCI layout; the layout as a tar when asked.
func build(o options) (result, error) {
	config, err := os.ReadFile(filepath.Join(o.repo, configSource))
	if err != nil {
		return result{}, err
	}
	var imgs []v1.Image
	for _, arch := range o.arches {
		binary, err := binaryFor(o, arch)
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", arch, err)
		}
		m := o.meta
		m.arch = arch
		img, err := buildImage(binary, config, m)
		if err != nil {
			return result{}, err
		}
		imgs = append(imgs, img)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return result{}, err
	}
	res, err := write(o, imgs)
	if err != nil {
		return result{}, err
	}
	if o.ociArchive != "" {
		if err := writeOCIArchive(filepath.Join(o.out, "oci"), o.ociArchive, o.created); err != nil {
			return result{}, fmt.Errorf("OCI archive: %w", err)
		}
	}
	return res, nil
}

// write writes the layout (and for one image the docker archive) and says what it holds.
func write(o options, imgs []v1.Image) (result, error) {
	tag := tagOf(o.version)
	var res result
	for i, img := range imgs {
		d, err := img.Digest()
		if err != nil {
			return res, err
		}
		res.platforms = append(res.platforms, platformImage{platformOf(o.arches[i]).String(), d.String()})
	}
	if len(imgs) == 1 {
		if err := writeOCILayout(filepath.Join(o.out, "oci"), tag, imgs[0]); err != nil {
			return res, fmt.Errorf("OCI layout: %w", err)
		}
		if err := writeDockerArchive(filepath.Join(o.out, "pulsar-proxy.tar"), tag, imgs[0]); err != nil {
			return res, fmt.Errorf("docker archive: %w", err)
		}
		res.digest = res.platforms[0].digest
		return res, nil
	}
	idx := imageIndex(imgs, o.arches)
	if err := writeOCIIndexLayout(filepath.Join(o.out, "oci"), tag, idx); err != nil {
		return res, fmt.Errorf("OCI layout: %w", err)
	}
	d, err := idx.Digest()
	res.digest = d.String()
	return res, err
}

// binaryFor is the prebuilt binary given for arch, checked to be a linux executable of that
// architecture, or one built from the repository.
func binaryFor(o options, arch string) ([]byte, error) {
	if file, ok := o.binaries[arch]; ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		return b, checkELF(b, arch)
	}
	tmp, err := os.MkdirTemp("", "pulsar-proxy-image")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "pulsar-proxy")
	if err := buildBinary(o.repo, o.version, arch, out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}
