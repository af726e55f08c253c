package rig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// PyClient runs pyclient.py (beside this file) with the pinned Python Pulsar client.
type PyClient struct {
	Python  string // the virtualenv's interpreter
	Program string // pyclient.py
}

// PythonClient installs the pinned Python client into the rig cache when it is not there yet
// (python-client.sh; a fraction of a second when cached), writing the script's output to
// os.Stderr. A missing python3 or venv module is a *PrereqError.
func PythonClient(ctx context.Context) (*PyClient, error) {
	dir, err := ScriptsDir()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "python-client.sh"))
	dieWithParent(cmd)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	os.Stderr.Write(out.Bytes())
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return nil, &PrereqError{Reason: strings.TrimPrefix(lastLines(out.String(), 1), "python-client: ")}
	}
	if err != nil {
		return nil, fmt.Errorf("rig: python-client.sh: %w\n%s", err, lastLines(out.String(), 20))
	}
	python, ok := strings.CutPrefix(lastLines(out.String(), 1), "python-client: python ")
	if !ok {
		return nil, fmt.Errorf("rig: python-client.sh named no interpreter:\n%s", lastLines(out.String(), 5))
	}
	return &PyClient{Python: python, Program: filepath.Join(dir, "pyclient.py")}, nil
}

// PySummary is pyclient.py's JSON summary (the last line of its stdout).
type PySummary struct {
	Mode        string         `json:"mode"`
	Topic       string         `json:"topic"`
	Count       int            `json:"count"`
	Client      string         `json:"client"`
	Sent        int            `json:"sent"`
	Received    int            `json:"received"`
	Duplicates  int            `json:"duplicates"`
	Mismatched  int            `json:"mismatched"`
	OutOfOrder  int            `json:"out_of_order"`
	Missing     int            `json:"missing"`
	Partitions  map[string]int `json:"partitions"`
	Error       string         `json:"error"`
	Seconds     float64        `json:"seconds"`
	FirstMissed []int          `json:"first_missing"`
}

// Run runs pyclient.py with args (see its --help) until it exits or ctx ends (then it is
// killed). It returns the summary, the program's stderr (the client's log) and an error when
// the program failed or printed no summary.
func (p *PyClient) Run(ctx context.Context, args ...string) (PySummary, []byte, error) {
	cmd := exec.CommandContext(ctx, p.Python, append([]string{"-B", p.Program}, args...)...)
	dieWithParent(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	var s PySummary
	last := lastLines(stdout.String(), 1)
	if err := json.Unmarshal([]byte(last), &s); err != nil {
		return s, stderr.Bytes(), fmt.Errorf("pyclient.py printed no summary (%v; exit: %v): %q", err, runErr, last)
	}
	if runErr != nil {
		return s, stderr.Bytes(), fmt.Errorf("pyclient.py: %w: %s", runErr, last)
	}
	return s, stderr.Bytes(), nil
}

// PyPayload is message i of pyclient.py's payload scheme: "<prefix>-<i as 8 digits>-" and
// i%700 filler bytes (the hex SHA-256 of that header, repeated), so a Go client can produce
// what the Python client checks, and check what it produced.
func PyPayload(prefix string, i int) []byte {
	head := fmt.Sprintf("%s-%08d-", prefix, i)
	sum := sha256.Sum256([]byte(head))
	filler := []byte(hex.EncodeToString(sum[:]))
	out := []byte(head)
	for n := i % 700; n > 0; n -= min(n, len(filler)) {
		out = append(out, filler[:min(n, len(filler))]...)
	}
	return out
}
