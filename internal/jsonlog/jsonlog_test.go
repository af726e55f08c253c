package jsonlog

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestCheckLine(t *testing.T) {
	for _, tc := range []struct {
		line, wantErr string
	}{
		{`{"level":"info","message":"ok"}`, ""},
		{`{"a":{"b":1,"c":[{"d":1},{"d":2}]},"e":null}`, ""},
		{`{"a":"x","a":"y"}`, `duplicate key "a" in the line`},
		// zerolog's own message key, written twice: the bug this package was made for.
		{`{"level":"debug","message":"pulsar-proxy: bad token","message":"refusing client"}`, `duplicate key "message"`},
		{`{"details":{"expired":1,"expired":2}}`, `duplicate key "expired" in details`},
		{`{"l":[{"k":1,"k":2}]}`, `duplicate key "k" in l[0]`},
		{`not json`, "not JSON"},
		{`["a"]`, "not a JSON object"},
		{`{"a":1} {"b":2}`, "more than one JSON value"},
		{`{"a":1`, "bad JSON"},
	} {
		err := CheckLine([]byte(tc.line))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("CheckLine(%s) = %v; want nil", tc.line, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("CheckLine(%s) = %v; want an error containing %q", tc.line, err, tc.wantErr)
		}
	}
}

func TestCheckNumbersTheBadLines(t *testing.T) {
	log := "{\"a\":1}\n\n{\"a\":1,\"a\":2}\nplain text\n{\"b\":2}\n"
	errs := Check([]byte(log), 0)
	if len(errs) != 2 || !strings.HasPrefix(errs[0].Error(), "line 3: duplicate key") || !strings.HasPrefix(errs[1].Error(), "line 4: not JSON") {
		t.Fatalf("Check = %v", errs)
	}
	if errs := Check([]byte(log), 1); len(errs) != 1 {
		t.Fatalf("Check with limit 1 = %v", errs)
	}
}

// Seconds writes a duration as a number of seconds under a name that says so.
func TestSeconds(t *testing.T) {
	var b bytes.Buffer
	log := zerolog.New(&b)
	Seconds(log.Info(), "drain_timeout", 30*time.Second).Msg("x")
	Seconds(log.Info(), "took", 1500*time.Microsecond).Msg("y")
	want := `{"level":"info","drain_timeout_seconds":30,"message":"x"}` + "\n" + `{"level":"info","took_seconds":0.0015,"message":"y"}` + "\n"
	if b.String() != want {
		t.Fatalf("got\n%s want\n%s", b.String(), want)
	}
	if errs := Check(b.Bytes(), 0); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestNoBareDurations: no product code logs a duration with zerolog's Dur, Durs or TimeDiff,
// whose number has no unit (its unit is a process-wide zerolog setting); Seconds is the way.
func TestNoBareDurations(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".cache", ".git", "test", "bench", "tools", "testdata", "node_modules":
				if path != root {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Dur", "Durs", "TimeDiff":
					found = append(found, fset.Position(sel.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("durations logged without a unit (use jsonlog.Seconds): %s", strings.Join(found, ", "))
	}
	if fset.Base() < 10000 {
		t.Errorf("read only %d bytes of source: is the walk rooted at the module?", fset.Base())
	}
}
