package rig

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The CLI's stdout is its answer alone, even on the run that writes the class-data archive
// (the JVM then warns about every class it cannot archive): in CI, with no archive yet, the
// first pulsar-admin of a run is that one.
func TestAdminCLIStdoutIsTheAnswer(t *testing.T) {
	if _, err := ToolsClasspath(); err != nil {
		t.Fatal(err) // make test fetches the jars before the test module runs
	}
	cli.Lock()
	saved := cli.archive
	cli.checked, cli.archive = true, filepath.Join(t.TempDir(), "admin-cli.jsa")
	cli.Unlock()
	t.Cleanup(func() {
		cli.Lock()
		cli.archive = saved
		cli.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := Admin{URL: "http://127.0.0.1:1", Dir: t.TempDir()} // nothing listens: the CLI fails fast
	if _, training := cliArchive(""); !training {
		t.Fatal("the run would not write the archive")
	}
	cliTrained(cli.archive, false) // let Run be the one that writes it
	res := a.Run(ctx, "topics", "list", "public/default")
	if res.Err == nil {
		t.Fatalf("want a failure with nothing listening: %s", res)
	}
	if strings.Contains(res.Stdout, "[warning]") {
		t.Errorf("the JVM's warnings are in stdout: %.300s", res.Stdout)
	}
	if !strings.Contains(res.Stderr, "Connection refused") {
		t.Errorf("stderr does not say why it failed: %.300s", res.Stderr)
	}
}
