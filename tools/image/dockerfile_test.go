package main

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDockerfileMatchesImage holds the Dockerfile (which cannot be built here: no Docker
// daemon) to the facts this tool builds the image from.
func TestDockerfileMatchesImage(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines and drop comments: one instruction per line.
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(b), " ")
	checkFinalStage(t, finalStage(text))
	checkGoBuild(t, text)
}

// stage is the instructions of one stage of a Dockerfile, one a line.
type stage []string

// finalStage is the last stage of the Dockerfile text (continuation lines joined), comments
// and blank lines left out.
func finalStage(text string) stage {
	var final stage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "FROM ") {
			final = nil
		}
		final = append(final, line)
	}
	return final
}

// instr is the argument of the stage's first instruction name; an error when it has none.
func (s stage) instr(t *testing.T, name string) string {
	t.Helper()
	for _, l := range s {
		if strings.HasPrefix(l, name+" ") {
			return strings.TrimPrefix(l, name+" ")
		}
	}
	t.Errorf("final stage has no %s", name)
	return ""
}

// jsonArray is the argument of instruction name in its JSON form.
func (s stage) jsonArray(t *testing.T, name string) []string {
	t.Helper()
	var a []string
	if err := json.Unmarshal([]byte(s.instr(t, name)), &a); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	return a
}

// checkFinalStage: the final stage is the image this tool builds: from scratch, its user,
// ports, entrypoint, command, files and label keys.
func checkFinalStage(t *testing.T, final stage) {
	t.Helper()
	if got := final.instr(t, "FROM"); got != "scratch" {
		t.Errorf("final stage FROM %q, want scratch", got)
	}
	if got := final.instr(t, "USER"); got != user {
		t.Errorf("USER %q, tools/image %q", got, user)
	}
	if got := strings.Fields(final.instr(t, "EXPOSE")); !slices.Equal(got, exposedPorts) {
		t.Errorf("EXPOSE %q, tools/image %q", got, exposedPorts)
	}
	if got := final.jsonArray(t, "ENTRYPOINT"); !slices.Equal(got, entrypoint) {
		t.Errorf("ENTRYPOINT %q, tools/image %q", got, entrypoint)
	}
	if got := final.jsonArray(t, "CMD"); !slices.Equal(got, cmd) {
		t.Errorf("CMD %q, tools/image %q", got, cmd)
	}
	for _, copyLine := range []string{"--from=build /out/pulsar-proxy " + binaryPath, configSource + " " + configPath} {
		if !slices.Contains(final, "COPY "+copyLine) {
			t.Errorf("no COPY %s", copyLine)
		}
	}
	var labelKeys []string
	for _, m := range regexp.MustCompile(`(org\.opencontainers\.image\.[a-z]+)=`).FindAllStringSubmatch(final.instr(t, "LABEL"), -1) {
		labelKeys = append(labelKeys, m[1])
	}
	want := slices.Sorted(maps.Keys(labels(meta{revision: "x", created: time.Now()})))
	if slices.Sort(labelKeys); !slices.Equal(labelKeys, want) {
		t.Errorf("LABEL keys %q, tools/image %q", labelKeys, want)
	}
}

// checkGoBuild: the Dockerfile's go build (its last) has the same flags as buildBinary.
func checkGoBuild(t *testing.T, text string) {
	t.Helper()
	wantBuild := []string{"CGO_ENABLED=0", "go build"}
	wantBuild = append(wantBuild, buildFlags...)
	wantBuild = append(wantBuild, `-ldflags "`+ldflags("${VERSION}")+`"`, "./cmd/pulsar-proxy")
	var build string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "go build") {
			build = l
		}
	}
	for _, w := range wantBuild {
		if !strings.Contains(build, w) {
			t.Errorf("Dockerfile's go build %q lacks %q", build, w)
		}
	}
}
