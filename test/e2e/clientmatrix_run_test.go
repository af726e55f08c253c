package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// mxJavaColumn is the Java column: testdata/MatrixClient.java, compiled once against the
// rig's jars, one JVM per run for all its features.
func mxJavaColumn(t *testing.T) *matrixClient {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	prog, err := rig.CompileJava(ctx, filepath.Join("testdata", "MatrixClient.java"))
	rig.Need(t, "the Java client", err)
	return &matrixClient{name: "Java", run: func(ctx context.Context, env matrixEnv, features []string) (map[string]cell, string, error) {
		return runMatrixProgram(prog.Command(ctx, env.args(features)...))
	}}
}

// mxPythonColumn is the Python column: testdata/matrixclient.py in the rig's virtualenv of
// the pinned pulsar-client, one process per run.
func mxPythonColumn(t *testing.T) *matrixClient {
	py := needPython(t)
	return &matrixClient{name: "Python", run: func(ctx context.Context, env matrixEnv, features []string) (map[string]cell, string, error) {
		args := append([]string{"-B", filepath.Join("testdata", "matrixclient.py")}, env.args(features)...)
		return runMatrixProgram(exec.CommandContext(ctx, py.Python, args...))
	}}
}

// runMatrixProgram runs a client program and reads its verdicts; an error says how it ended
// when that was not well (the verdicts it printed before still count).
func runMatrixProgram(cmd *exec.Cmd) (map[string]cell, string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	cells, version := parseVerdicts(stdout.String())
	if err != nil {
		err = fmt.Errorf("%s: %w\n%s", filepath.Base(cmd.Path), err, tailOf(stderr.Bytes(), 3000))
	}
	return cells, version, err
}

// mxGoColumn is the Go column: pulsar-client-go, the features of clientmatrix_go_test.go
// run in this process.
func mxGoColumn() *matrixClient {
	version := mxClientVersion()
	return &matrixClient{name: "Go", run: func(ctx context.Context, env matrixEnv, features []string) (map[string]cell, string, error) {
		cells := map[string]cell{}
		for _, id := range features {
			cells[id] = runGoFeature(ctx, env, id)
		}
		return cells, version, nil
	}}
}

// mxClientVersion is the pulsar-client-go version test/go.mod requires.
func mxClientVersion() string {
	b, _ := os.ReadFile(filepath.Join(proxyproc.RepoRoot(), "test", "go.mod"))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "github.com/apache/pulsar-client-go" {
			return f[1]
		}
	}
	return "(version unknown)"
}

// prepareTerminated produces m-0..m-2 to topic and terminates it, for the termination feature.
func prepareTerminated(ctx context.Context, url, topic string) error {
	c, err := mxClientOf(pulsar.ClientOptions{URL: url})
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return err
	}
	for i := range 3 {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)}); err != nil {
			p.Close()
			return err
		}
	}
	p.Close()
	return theRig.TerminateTopic(ctx, topic)
}

// newSecretKey writes a random HS256 key, its bytes as they are (as Pulsar's
// `tokens create-secret-key --output` writes it, and brokers and proxy read it).
func newSecretKey(path string) error {
	key := make([]byte, 32)
	rand.Read(key)
	return os.WriteFile(path, key, 0o600)
}

// signHS256 signs a token for role with the key in secretFile, expiring after ttl.
func signHS256(secretFile, role string, ttl time.Duration) (string, error) {
	key, err := authn.ReadSecretKey(secretFile)
	if err != nil {
		return "", err
	}
	claims := jwt.MapClaims{"sub": role, "exp": time.Now().Add(ttl).Unix()}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
}

// readCommittedMatrix reads the results of docs/client-matrix.md as committed (feature ->
// client -> result), before the run rewrites it; none when there is no such file yet.
func readCommittedMatrix(t *testing.T) map[string]map[string]string {
	b, err := exec.Command("git", "-C", proxyproc.RepoRoot(), "show", "HEAD:docs/client-matrix.md").Output()
	if err != nil {
		t.Logf("no committed docs/client-matrix.md to compare with (%v)", err)
		return map[string]map[string]string{}
	}
	out := parseMatrixDoc(string(b))
	passing := 0
	for _, row := range out {
		for _, r := range row {
			if r == cellPass {
				passing++
			}
		}
	}
	// A committed file whose table cannot be read would make the comparison vacuous.
	if len(out) == 0 {
		t.Fatal("the committed docs/client-matrix.md has no table rows this test can read")
	}
	t.Logf("committed matrix: %d features, %d passing cells to hold", len(out), passing)
	return out
}

// parseMatrixDoc reads the table of a client-matrix.md: feature id (the `code` of the first
// column) -> client (column header) -> the cell's first word (pass, fail, not).
func parseMatrixDoc(doc string) map[string]map[string]string {
	out := map[string]map[string]string{}
	var header []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cols := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		if cols[0] == "feature" {
			header = cols
			continue
		}
		id, ok := backticked(cols[0])
		if !ok || len(cols) != len(header) {
			continue
		}
		out[id] = map[string]string{}
		for i := 1; i < len(cols); i++ {
			out[id][header[i]] = strings.Fields(cols[i] + " ?")[0]
		}
	}
	return out
}

// backticked returns the first `code` span of s.
func backticked(s string) (string, bool) {
	_, rest, ok := strings.Cut(s, "`")
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, "`")
	return id, ok
}

// renderMatrix writes docs/client-matrix.md: the table, then a note for every cell that is
// not a plain pass.
func renderMatrix(clients []*matrixClient, cells map[string]map[string]cell) string {
	var b, notes strings.Builder
	b.WriteString("# Client feature matrix\n\n")
	b.WriteString("Generated by `TestClientFeatureMatrix` (`test/e2e/clientmatrix_test.go`, part of `make test`); " +
		"do not edit: every run rewrites this file, and the test fails when a cell recorded here as `pass` " +
		"does not pass, or when a feature fails through the proxy but works directly against a broker.\n\n")
	b.WriteString("Each cell is measured through pulsar-proxy (its plaintext listener; TLS, mTLS and token rows " +
		"on its TLS listener and a second proxy that authenticates) in front of the e2e rig's two Apache Pulsar " +
		"brokers, with these clients: ")
	var names []string
	for _, c := range clients {
		names = append(names, fmt.Sprintf("%s %s", c.name, c.version))
	}
	b.WriteString(strings.Join(names, ", ") + " (Go: pulsar-client-go; Java: the client of the rig's Pulsar jars, " +
		"`test/e2e/testdata/MatrixClient.java`; Python: pulsar-client, `test/e2e/testdata/matrixclient.py`; WebSocket: " +
		"Pulsar's WebSocket API on the proxy's HTTP and HTTPS listeners, `test/e2e/clientmatrix_ws_test.go`, " +
		"compared where it fails with a broker's own WebSocket service).\n\n")
	b.WriteString("`pass`: works through the proxy. `fail`: does not (the note says why, and whether it also fails " +
		"directly against a broker). `not supported`: the client has no API for it (the note says what is missing).\n\n")
	b.WriteString("| feature |")
	for _, c := range clients {
		b.WriteString(" " + c.name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(clients)) + "\n")
	n := 0
	for _, row := range matrixRows {
		fmt.Fprintf(&b, "| `%s` %s |", row.id, row.title)
		for _, c := range clients {
			v := cells[row.id][c.name]
			text := map[string]string{cellPass: "pass", cellFail: "fail", cellUnsupported: "not supported"}[v.Result]
			if text == "" {
				text = "fail"
			}
			if v.Result != cellPass || v.Detail != "" {
				n++
				text += fmt.Sprintf(" [%d]", n)
				notes.WriteString(noteFor(n, row.id, c.name, v))
			}
			b.WriteString(" " + text + " |")
		}
		b.WriteString("\n")
	}
	if notes.Len() > 0 {
		b.WriteString("\n## Notes\n\n" + notes.String())
	}
	return b.String()
}

// knownCauses explain a failure that happens directly against the brokers too, when its
// symptom shows (so an explanation is never attached to a failure it does not explain).
var knownCauses = []struct{ id, client, symptom, cause string }{
	{"transactions", "", "transaction coordinator", "The e2e rig runs its brokers with transactions off " +
		"(no transaction coordinator, `test/rig/README.md`); this cell is measured on every run and passes once the rig runs coordinators."},
	{"transactions", "Go", "of an open or aborted transaction was delivered", "pulsar-client-go " +
		"puts the transaction id in CommandSend but not in the message's metadata (`pulsar/internal/commands.go`, " +
		"`batch_builder.go`), so brokers deliver an aborted transaction's messages once it ends."},
}

func noteFor(n int, id, client string, v cell) string {
	s := fmt.Sprintf("%d. `%s`, %s: ", n, id, client)
	switch v.Result {
	case cellPass:
		return s + v.Detail + ".\n"
	case cellUnsupported:
		return s + "not supported: " + v.Detail + ".\n"
	}
	s += "fails through the proxy: " + strings.TrimSpace(v.Detail) + ". "
	switch v.Direct {
	case cellFail:
		s += "Directly against the brokers it **also fails**: " + strings.TrimSpace(v.DirectDetail) + "."
		for _, k := range knownCauses {
			if k.id == id && (k.client == "" || k.client == client) && strings.Contains(v.DirectDetail, k.symptom) {
				s += " " + k.cause
			}
		}
	case cellPass:
		s += "Directly against the brokers it **works**: a proxy defect."
	case "":
		s += "Not run directly."
	default:
		s += "Directly: " + v.Direct + " " + v.DirectDetail + "."
	}
	return s + "\n"
}
