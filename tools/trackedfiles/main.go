// Command trackedfiles fails when the repository tracks a file it should not: an executable
// (ELF, Mach-O or PE), any other file with NUL bytes, or a file larger than 1 MiB, unless the
// allow-list names it. `make test-unit` runs it first; a build output committed by mistake
// (an 18 MB pulsar-proxy binary once sat at the root) then fails the build.
//
//	go run ./tools/trackedfiles [-allow .ci/large-files.allow] [-max 1048576] [repo]
//
// The allow-list has one entry a line, a path or a path.Match pattern (`*` stays within a
// folder), then `# reason`; blank lines and lines that start with # are comments. An entry
// lets binary content (NUL bytes) and size through, never an executable. An entry that no
// tracked file matches is an error too, so the list cannot outlive what it excuses.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

func main() {
	allow := flag.String("allow", ".ci/large-files.allow", "allow-list, relative to the repository (empty: none)")
	maxSize := flag.Int64("max", 1<<20, "largest size in bytes of a file that is not on the allow-list")
	flag.Parse()
	repo := "."
	if flag.NArg() > 0 {
		repo = flag.Arg(0)
	}
	problems, err := check(repo, *allow, *maxSize)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trackedfiles:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		list := *allow
		if list == "" {
			list = "an allow-list (-allow)"
		}
		fmt.Fprintf(os.Stderr, "trackedfiles: %d problem(s); remove the file (git rm --cached) and ignore it in .gitignore, "+
			"or, for a committed artefact meant to be there, add it to %s with a reason\n", len(problems), list)
		os.Exit(1)
	}
}

// entry is one line of the allow-list.
type entry struct {
	pattern, reason string
	line            int
	used            bool
}

// check returns one line per problem found among repo's tracked files.
func check(repo, allowFile string, maxSize int64) ([]string, error) {
	files, err := trackedFiles(repo)
	if err != nil {
		return nil, err
	}
	var allow []*entry
	if allowFile != "" {
		if allow, err = readAllowList(filepath.Join(repo, allowFile)); err != nil {
			return nil, err
		}
	}
	var problems []string
	for _, name := range files {
		full := filepath.Join(repo, filepath.FromSlash(name))
		fi, err := os.Lstat(full)
		if errors.Is(err, os.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
			continue // deleted in the work tree, a symlink or a submodule
		}
		if err != nil {
			return nil, err
		}
		kind, hasNUL, err := inspect(full)
		if err != nil {
			return nil, err
		}
		allowed := false
		for _, e := range allow {
			if ok, _ := path.Match(e.pattern, name); ok {
				e.used, allowed = true, true
			}
		}
		switch {
		case kind != "":
			problems = append(problems, fmt.Sprintf("%s: an executable (%s); build outputs are never committed", name, kind))
		case allowed:
		case fi.Size() > maxSize:
			problems = append(problems, fmt.Sprintf("%s: %d bytes, larger than %d and not on the allow-list", name, fi.Size(), maxSize))
		case hasNUL:
			problems = append(problems, fmt.Sprintf("%s: binary content (NUL bytes) and not on the allow-list", name))
		}
	}
	for _, e := range allow {
		if !e.used {
			problems = append(problems, fmt.Sprintf("%s:%d: %q matches no tracked file; remove the entry", allowFile, e.line, e.pattern))
		}
	}
	return problems, nil
}

func trackedFiles(repo string) ([]string, error) {
	cmd := exec.Command("git", "-C", repo, "ls-files", "-z")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %v: %s", repo, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

func readAllowList(file string) ([]*entry, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*entry
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, reason, _ := strings.Cut(line, "#")
		pattern, reason = strings.TrimSpace(pattern), strings.TrimSpace(reason)
		if reason == "" {
			return nil, fmt.Errorf("%s:%d: %q has no reason (`path # why it is committed`)", file, i+1, pattern)
		}
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %v", file, i+1, pattern, err)
		}
		out = append(out, &entry{pattern: pattern, reason: reason, line: i + 1})
	}
	return out, nil
}

// inspect names the executable format of the file ("" if none) and whether it holds a NUL
// byte anywhere.
func inspect(file string) (kind string, hasNUL bool, err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	head, _ := r.Peek(4096)
	kind = executableKind(head, f)
	for {
		chunk, err := r.Peek(64 << 10)
		if bytes.IndexByte(chunk, 0) >= 0 {
			return kind, true, nil
		}
		r.Discard(len(chunk))
		if err == io.EOF {
			return kind, false, nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return "", false, err
		}
	}
}

// executableKind recognises the magic numbers of ELF, Mach-O (thin and universal) and PE
// (an MZ header whose e_lfanew points at "PE\0\0"; read through f when beyond head).
func executableKind(head []byte, f io.ReaderAt) string {
	if len(head) < 4 {
		return ""
	}
	switch m := binary.BigEndian.Uint32(head); {
	case m == 0x7f454c46:
		return "ELF"
	case m == 0xfeedface || m == 0xfeedfacf || m == 0xcefaedfe || m == 0xcffaedfe:
		return "Mach-O"
	case m == 0xcafebabe || m == 0xbebafeca:
		return "Mach-O universal (or a Java class)"
	}
	if head[0] == 'M' && head[1] == 'Z' && len(head) >= 0x40 {
		off := int64(binary.LittleEndian.Uint32(head[0x3c:]))
		var sig [4]byte
		if _, err := f.ReadAt(sig[:], off); err == nil && string(sig[:]) == "PE\x00\x00" {
			return "PE"
		}
	}
	return ""
}
