package rig

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// authz/testdata/topicnames.json holds Pulsar's answers for the topic names authz's parser is
// tested with. These tests ask Pulsar's own TopicName (TopicNameProbe.java, compiled at test
// time against the rig's Pulsar jars) and fail on any difference. To add a name, add an entry
// with only "input" (or "inputBase64" for bytes that are not UTF-8) and run
//
//	go test -run TopicNames ./test/rig/ -update-topicnames
var updateTopicNames = flag.Bool("update-topicnames", false, "rewrite authz/testdata/topicnames.json with Pulsar's answers")

// topicNameCase is an entry of topicnames.json: an input and Pulsar's reading of it.
type topicNameCase struct {
	Input       *string `json:"input,omitempty"`
	InputBase64 string  `json:"inputBase64,omitempty"` // for inputs that are not UTF-8
	Valid       bool    `json:"valid"`
	Error       string  `json:"error,omitempty"` // the exception's message
	Domain      string  `json:"domain,omitempty"`
	Tenant      string  `json:"tenant,omitempty"`
	Cluster     string  `json:"cluster,omitempty"` // legacy names only
	Namespace   string  `json:"namespace,omitempty"`
	Local       string  `json:"local,omitempty"`
	Partition   *int    `json:"partitionIndex,omitempty"`
	Partitioned string  `json:"partitionedTopicName,omitempty"`
	Complete    string  `json:"completeName,omitempty"`
}

type topicNameTable struct {
	Note          string          `json:"note"`
	PulsarVersion string          `json:"pulsarVersion"`
	Names         []topicNameCase `json:"names"`
}

func (c topicNameCase) bytes() ([]byte, error) {
	if c.Input != nil {
		return []byte(*c.Input), nil
	}
	return base64.StdEncoding.DecodeString(c.InputBase64)
}

// answer is the case without its input, to compare Pulsar's fields only.
func (c topicNameCase) answer() topicNameCase {
	c.Input, c.InputBase64 = nil, ""
	return c
}

func TestTopicNamesArePulsars(t *testing.T) {
	probe := topicNameProbe(t)
	file := filepath.Join(repoDir(t), "authz", "testdata", "topicnames.json")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var table topicNameTable
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&table); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var stdin strings.Builder
	for i, c := range table.Names {
		in, err := c.bytes()
		if err != nil || (c.Input == nil) == (c.InputBase64 == "") {
			t.Fatalf("names[%d]: give exactly one of input and inputBase64 (%v)", i, err)
		}
		stdin.WriteString(base64.StdEncoding.EncodeToString(in) + "\n")
	}
	out := probe(t, "names", stdin.String())
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(table.Names) {
		t.Fatalf("%d answers for %d names:\n%s", len(lines), len(table.Names), out)
	}
	version := pulsarVersion(t)
	for i, c := range table.Names {
		got, err := parseProbeAnswer(lines[i])
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		in, _ := c.bytes()
		if *updateTopicNames {
			got.Input, got.InputBase64 = c.Input, c.InputBase64
			table.Names[i] = got
			continue
		}
		if want := jsonLine(c.answer()); want != jsonLine(got) {
			t.Errorf("%q:\n table:  %s\n Pulsar: %s", in, want, jsonLine(got))
		}
	}
	if *updateTopicNames {
		table.PulsarVersion = version
		table.Note = "Pulsar's TopicName.get(input) (test/rig/TopicNameProbe.java; the input decoded from UTF-8 as the broker does, " +
			"invalid bytes to U+FFFD). Checked by test/rig/topicname_test.go; regenerate with -update-topicnames."
		writeTopicNameTable(t, file, table)
		t.Logf("wrote %d answers of Pulsar %s to %s", len(table.Names), version, file)
	} else if table.PulsarVersion != version {
		t.Errorf("the table has Pulsar %s's answers, the rig runs %s", table.PulsarVersion, version)
	}
}

// TestTopicNameCharsArePulsars sweeps every UTF-16 code unit that is not a surrogate through
// what the parser decides char by char, where Java's Character data may differ from Go's
// unicode tables: partition digits (Character.digit, any script), blank local names
// (Character.isWhitespace) and domains compared with equalsIgnoreCase.
func TestTopicNameCharsArePulsars(t *testing.T) {
	probe := topicNameProbe(t)
	out := probe(t, "chars", "")
	domains := []string{authz.DomainPersistent, authz.DomainNonPersistent}
	seen, failures := 0, 0
	fail := func(format string, args ...any) {
		if failures++; failures <= 50 {
			t.Errorf(format, args...)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3+len(domains) {
			t.Fatalf("bad line %q", sc.Text())
		}
		code, err1 := strconv.ParseUint(f[0], 16, 16)
		index, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			t.Fatalf("bad line %q", sc.Text())
		}
		c := string(rune(code))
		seen++
		if c != "/" {
			name := "x-partition-" + c
			if tn, err := authz.ParseTopic(name); err != nil || tn.Partition != index {
				fail("%q (U+%04X): partition %d %v, Pulsar's getPartitionIndex says %d", name, code, tn.Partition, err, index)
			}
			name = "a/b/" + c
			if _, err := authz.ParseTopic(name); (err != nil) != (f[2] == "1") {
				fail("%q (U+%04X): error %v, Pulsar's isBlank(local name) says %s", name, code, err, f[2])
			}
		}
		for d, value := range domains {
			mask, err := strconv.ParseUint(f[3+d], 10, 64)
			if err != nil {
				t.Fatalf("bad line %q", sc.Text())
			}
			for i := range len(value) {
				name := value[:i] + c + value[i+1:] + "://a/b/c"
				tn, err := authz.ParseTopic(name)
				if want := mask&(1<<i) != 0; (err == nil && tn.Domain == value) != want {
					fail("%q (U+%04X): domain %q %v, Pulsar's %q.equalsIgnoreCase says %v", name, code, tn.Domain, err, value, want)
				}
			}
		}
	}
	if seen != 0x10000-0x800 {
		t.Fatalf("%d chars, want every one but the surrogates", seen)
	}
	if failures > 50 {
		t.Errorf("... %d differences in all", failures)
	}
}

// parseProbeAnswer reads a line of TopicNameProbe names.
func parseProbeAnswer(line string) (topicNameCase, error) {
	f := strings.Split(line, "\t")
	str := func(i int) string {
		b, err := base64.StdEncoding.DecodeString(f[i])
		if err != nil || !utf8.Valid(b) {
			panic(fmt.Sprintf("field %d of %q: %v", i, line, err))
		}
		return string(b)
	}
	switch {
	case f[0] == "err" && len(f) == 3:
		return topicNameCase{Error: f[1] + ": " + str(2)}, nil
	case f[0] == "ok" && len(f) == 9:
		idx, err := strconv.Atoi(f[6])
		if err != nil {
			return topicNameCase{}, err
		}
		c := topicNameCase{Valid: true, Domain: str(1), Tenant: str(2), Namespace: str(4), Local: str(5),
			Partition: &idx, Partitioned: str(7), Complete: str(8)}
		if f[3] != "-" {
			c.Cluster = str(3)
		}
		return c, nil
	}
	return topicNameCase{}, fmt.Errorf("bad answer %q", line)
}

// jsonLine is c as one line of JSON, with the characters one cannot see (spaces other than
// ' ', format and control characters) written as \u escapes.
func jsonLine(c topicNameCase) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(c)
	var out strings.Builder
	for _, r := range strings.TrimSuffix(b.String(), "\n") {
		if r < 0x80 || unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S) {
			out.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&out, "\\u%04x", u)
		}
	}
	return out.String()
}

// writeTopicNameTable writes one entry a line, for readable diffs.
func writeTopicNameTable(t *testing.T, file string, table topicNameTable) {
	var b strings.Builder
	note, _ := json.Marshal(table.Note)
	fmt.Fprintf(&b, "{\n\"note\": %s,\n\"pulsarVersion\": %q,\n\"names\": [\n", note, table.PulsarVersion)
	for i, c := range table.Names {
		sep := ","
		if i == len(table.Names)-1 {
			sep = ""
		}
		b.WriteString(jsonLine(c) + sep + "\n")
	}
	b.WriteString("]\n}\n")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func repoDir(t *testing.T) string {
	dir, err := ScriptsDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(dir, "..", ".."))
}

func pulsarVersion(t *testing.T) string {
	v, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	return v["PULSAR_VERSION"]
}

// topicNameProbe compiles TopicNameProbe.java against the Pulsar classpath (fetching the jars
// with fetch-pulsar.sh when they are not cached) and returns a function that runs it. A
// missing javac, java or mvn skips outside CI (rig.Need).
func topicNameProbe(t *testing.T) func(t *testing.T, mode, stdin string) string {
	t.Helper()
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			Need(t, "Pulsar's TopicName", &PrereqError{Reason: tool + " is not on PATH (the probe of Pulsar's TopicName is Java)"})
		}
	}
	cp, err := pulsarClasspath()
	Need(t, "the Pulsar jars", err)
	dir, err := ScriptsDir()
	if err != nil {
		t.Fatal(err)
	}
	classes := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	javac := exec.CommandContext(ctx, "javac", "-encoding", "UTF-8", "-cp", cp, "-d", classes, filepath.Join(dir, "TopicNameProbe.java"))
	if out, err := javac.CombinedOutput(); err != nil {
		t.Fatalf("javac TopicNameProbe.java: %v\n%s", err, out)
	}
	return func(t *testing.T, mode, stdin string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "java", "-cp", classes+string(os.PathListSeparator)+cp, "TopicNameProbe", mode)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("java TopicNameProbe %s: %v\n%s", mode, err, stderr.String())
		}
		return string(out)
	}
}

// pulsarClasspath returns the cached Pulsar classpath, running fetch-pulsar.sh first when it
// is not complete; the script's exit code 2 (a missing tool, such as mvn) is a *PrereqError.
func pulsarClasspath() (string, error) {
	if cp, err := JavaClasspath(); err == nil {
		return cp, nil
	}
	dir, err := ScriptsDir()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "fetch-pulsar.sh"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return "", &PrereqError{Reason: strings.TrimPrefix(lastLines(string(out), 1), "fetch-pulsar: ")}
	}
	if err != nil {
		return "", fmt.Errorf("fetch-pulsar.sh: %w\n%s", err, lastLines(string(out), 20))
	}
	return JavaClasspath()
}
