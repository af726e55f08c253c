package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
)

// buildBinary compiles cmd/pulsar-proxy of the repository at repo into out: statically linked
// for linux/arch, with the version stamped in.
func buildBinary(repo, version, arch, out string) error {
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-ldflags", ldflags(version), "-o", out, "./cmd/pulsar-proxy")
	c := exec.Command("go", args...)
	c.Dir = repo
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}

// elfMachines are the ELF machines of the architectures the image is built for.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkELF refuses a prebuilt binary that is not a linux executable for arch, so that a
// mix-up of files cannot put an arm64 binary in the amd64 image.
func checkELF(b []byte, arch string) error {
	want, ok := elfMachines[arch]
	if !ok {
		return fmt.Errorf("no ELF machine known for GOARCH %s", arch)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("prebuilt binary: %w", err)
	}
	if f.Machine != want || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
		return fmt.Errorf("prebuilt binary is a %s %s %s, want a %s ELFCLASS64 ET_EXEC", f.Machine, f.Class, f.Type, want)
	}
	return nil
}
