package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/prereq"
)

// gitRepo makes a git repository in a temp dir with files (path → content) added to its
// index, and the allow-list (if not empty) as .ci/large-files.allow.
func gitRepo(t *testing.T, files map[string][]byte, allow string) string {
	t.Helper()
	_, err := exec.LookPath("git")
	prereq.Need(t, "git on PATH", err)
	dir := t.TempDir()
	if allow != "" {
		files[".ci/large-files.allow"] = []byte(allow)
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

func fakeELF() []byte {
	b := make([]byte, 8192)
	copy(b, "\x7fELF\x02\x01\x01")
	return b
}

func fakePE() []byte {
	b := make([]byte, 1024)
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 0x80)
	copy(b[0x80:], "PE\x00\x00")
	return b
}

func fakeMachO() []byte {
	b := make([]byte, 4096)
	binary.BigEndian.PutUint32(b, 0xcffaedfe)
	return b
}

const twoMiB = 2 << 20

func TestCheck(t *testing.T) {
	for name, tc := range checkCases() {
		t.Run(name, func(t *testing.T) {
			repo := gitRepo(t, tc.files, tc.allow)
			allowFile := ".ci/large-files.allow"
			if tc.allow == "" {
				allowFile = ""
			}
			got, err := check(repo, allowFile, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// checkCase is a repository's tracked files and allow-list, and what check must find.
type checkCase struct {
	files map[string][]byte
	allow string
	want  []string // substrings, one per expected problem; none: the check passes
}

// checkCases are TestCheck's repositories, by name.
func checkCases() map[string]checkCase {
	text := []byte("package main\n")
	big := bytes.Repeat([]byte("a line of text\n"), twoMiB/15+1)
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"), make([]byte, 100)...)
	return map[string]checkCase{
		"text only": {files: map[string][]byte{"main.go": text, "README.md": text}},
		"ELF binary at the root": {
			files: map[string][]byte{"main.go": text, "pulsar-proxy": fakeELF()},
			want:  []string{"pulsar-proxy: an executable (ELF)"},
		},
		"ELF binary even when allowed": {
			files: map[string][]byte{"bin/tool": fakeELF()},
			allow: "bin/tool # tried to excuse it\n",
			want:  []string{"bin/tool: an executable (ELF)"},
		},
		"PE and Mach-O": {
			files: map[string][]byte{"a.exe": fakePE(), "b": fakeMachO()},
			want:  []string{"a.exe: an executable (PE)", "b: an executable (Mach-O)"},
		},
		"text starting with MZ is not PE": {files: map[string][]byte{"notes.txt": []byte("MZ is a magic number\n" + strings.Repeat("x", 100))}},
		"2 MiB file": {
			files: map[string][]byte{"data/big.txt": big},
			want:  []string{"data/big.txt: " + strconv.Itoa(len(big)) + " bytes, larger than 1048576"},
		},
		"2 MiB file on the allow-list": {
			files: map[string][]byte{"data/big.txt": big},
			allow: "# comment\n\ndata/big.txt   # a committed data set\n",
		},
		"binary content": {
			files: map[string][]byte{"results/chart.png": png},
			want:  []string{"results/chart.png: binary content (NUL bytes)"},
		},
		"binary content allowed by a pattern": {
			files: map[string][]byte{"results/chart.png": png, "results/b.png": png},
			allow: "results/*.png # charts of the benchmark\n",
		},
		"NUL beyond the first 64 KiB": {
			files: map[string][]byte{"late": append(bytes.Repeat([]byte("x"), 200<<10), 0)},
			want:  []string{"late: binary content"},
		},
		"stale allow-list entry": {
			files: map[string][]byte{"main.go": text},
			allow: "gone.png # removed since\n",
			want:  []string{`.ci/large-files.allow:1: "gone.png" matches no tracked file`},
		},
		"binary and large together": {
			files: map[string][]byte{"pulsar-proxy": fakeELF(), "dump.bin": append(big, 0)},
			want:  []string{"dump.bin: " + strconv.Itoa(len(big)+1) + " bytes", "pulsar-proxy: an executable (ELF)"},
		},
	}
}

// Only tracked files count: an ignored or untracked build output in the work tree is fine.
func TestUntrackedBinaryIsIgnored(t *testing.T) {
	repo := gitRepo(t, map[string][]byte{"main.go": []byte("package main\n")}, "")
	if err := os.WriteFile(filepath.Join(repo, "pulsar-proxy"), fakeELF(), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := check(repo, "", 1<<20); err != nil || len(got) != 0 {
		t.Fatalf("check = %q, %v; want no problem for an untracked file", got, err)
	}
}

func TestAllowListNeedsReasons(t *testing.T) {
	repo := gitRepo(t, map[string][]byte{"a.png": {0}}, "a.png\n")
	if _, err := check(repo, ".ci/large-files.allow", 1<<20); err == nil || !strings.Contains(err.Error(), "has no reason") {
		t.Fatalf("err = %v, want an allow-list entry without a reason refused", err)
	}
}

// The command itself: exit 1 and the problem on stderr for a planted binary, exit 0 once it
// is gone from the index.
func TestCommandExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "trackedfiles")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	repo := gitRepo(t, map[string][]byte{"main.go": []byte("package main\n"), "pulsar-proxy": fakeELF()}, "")
	run := func() (int, string) {
		cmd := exec.Command(bin, "-allow", "", repo)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), stderr.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, stderr.String()
	}
	if code, out := run(); code != 1 || !strings.Contains(out, "pulsar-proxy: an executable (ELF)") {
		t.Fatalf("with a planted binary: exit %d, stderr %q; want exit 1 naming it", code, out)
	}
	if out, err := exec.Command("git", "-C", repo, "rm", "-q", "--cached", "pulsar-proxy").CombinedOutput(); err != nil {
		t.Fatalf("git rm: %v\n%s", err, out)
	}
	if code, out := run(); code != 0 {
		t.Fatalf("after git rm --cached: exit %d, stderr %q; want 0", code, out)
	}
}
