package main

import (
	"archive/tar"
	"bytes"
	"io"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// meta is what differs from one build of the image to the next.
type meta struct {
	version  string
	revision string    // git commit; empty leaves the label out
	created  time.Time // image and file times: the commit's time keeps builds reproducible
	arch     string    // GOARCH
}

// labels are the OCI annotations of the image config.
func labels(m meta) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "pulsar-proxy",
		"org.opencontainers.image.description": "A gateway in front of Apache Pulsar brokers, speaking the Pulsar binary protocol",
		"org.opencontainers.image.version":     m.version,
		"org.opencontainers.image.created":     m.created.UTC().Format(time.RFC3339),
	}
	if m.revision != "" {
		l["org.opencontainers.image.revision"] = m.revision
	}
	return l
}

// buildImage is the image FROM scratch: one layer with the binary and the default config,
// run as a non-root user.
func buildImage(binary, config []byte, m meta) (v1.Image, error) {
	layer, err := singleLayer(binary, config, m.created)
	if err != nil {
		return nil, err
	}
	ports := map[string]struct{}{}
	for _, p := range exposedPorts {
		ports[p] = struct{}{}
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: m.arch,
		Variant:      platformOf(m.arch).Variant,
		OS:           "linux",
		Created:      v1.Time{Time: m.created},
		Config: v1.Config{
			User:         user,
			Entrypoint:   entrypoint,
			Cmd:          cmd,
			ExposedPorts: ports,
			Labels:       labels(m),
			WorkingDir:   "/",
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: m.created}, CreatedBy: "tools/image " + m.version},
	})
}

// singleLayer is a tar of the binary and the config with their parent directories, owned by
// root (the non-root user may read and run, not change them), all times set to mtime.
func singleLayer(binary, config []byte, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var dirs []string
	for d := path.Dir(configPath); d != "/"; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	files := []struct {
		path string
		mode int64
		body []byte
	}{{configPath, 0o644, config}, {binaryPath, 0o755, binary}}
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.path, "/"), Mode: f.mode, Size: int64(len(f.body)), ModTime: mtime}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
