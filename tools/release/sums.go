package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// sumsFile names the checksums file, in the format `sha256sum -c` and `shasum -a 256 -c` read.
const sumsFile = "SHA256SUMS"

// file is one file of the release.
type file struct {
	name string
	size int64
}

// writeSums writes SHA256SUMS over every regular file at the top of dir (folders, such as
// the image's OCI layout, are left out: their tar is a file) and returns those files, then
// SHA256SUMS itself.
func writeSums(dir string) ([]file, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []file
	var sums strings.Builder
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == sumsFile {
			continue
		}
		sum, size, err := sha256File(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, e.Name())
		files = append(files, file{e.Name(), size})
	}
	if err := os.WriteFile(filepath.Join(dir, sumsFile), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return append(files, file{sumsFile, int64(sums.Len())}), nil
}

func sha256File(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}
