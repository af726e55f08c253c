package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// The client feature matrix (docs/client-matrix.md): every feature of matrixRows measured
// with the Go, Java and Python clients through one proxy, on one rig. The file is rewritten
// by the run; the test fails when a cell the committed file records as passing does not pass
// now, or when a feature fails through the proxy but works directly against a broker.

// matrixRow is a feature: its id (the name the client programs know it by) and what it is.
type matrixRow struct{ id, title string }

var matrixRows = []matrixRow{
	{"produce-consume", "produce and consume"},
	{"partitioned", "partitioned topic, partitions on both brokers"},
	{"sub-exclusive", "Exclusive subscription (a second consumer refused)"},
	{"sub-shared", "Shared subscription (two consumers share the messages)"},
	{"sub-failover", "Failover subscription (one active consumer gets all)"},
	{"sub-key-shared", "Key_Shared subscription (each key to one consumer)"},
	{"batching-on", "batching on (messages arrive in batches)"},
	{"batching-off", "batching off (no batches)"},
	{"compression-lz4", "compression LZ4"},
	{"compression-zlib", "compression ZLIB"},
	{"compression-zstd", "compression ZSTD"},
	{"compression-snappy", "compression SNAPPY"},
	{"schema-json", "JSON schema (registered with GET_OR_CREATE_SCHEMA where the client uses it)"},
	{"schema-avro", "Avro schema (registered with GET_OR_CREATE_SCHEMA where the client uses it)"},
	{"regex-polling", "regex subscription, new topic found by polling (1 s period)"},
	{"regex-watcher", "regex subscription, new topic found by a topic-list watcher (1 h polling period)"},
	{"reader", "reader from earliest and from a message id"},
	{"seek-id", "seek by message id (delivery resumes after that message)"},
	{"seek-time", "seek by publish time"},
	{"nack-redelivery", "negative ack and redelivery"},
	{"dead-letter", "dead-letter topic"},
	{"retry-topic", "retry letter topic (reconsume later)"},
	{"delayed-delivery", "delayed delivery (a delayed message arrives after a later undelayed one)"},
	{"non-persistent", "non-persistent topic"},
	{"exclusive-producer", "exclusive producer fencing (a second Exclusive producer refused)"},
	{"termination", "topic termination → ReachedEndOfTopic"},
	{"transactions", "transactions (commit delivers, abort does not)"},
	{"chunking", "chunked message"},
	{"token-refresh", "token refresh (tokens expire every 3 s; the proxy challenges)"},
	{"tls", "TLS to the proxy, hostname verified"},
	{"mtls", "mutual TLS, role from the client certificate"},
}

// Cell results.
const (
	cellPass        = "pass"
	cellFail        = "fail"
	cellUnsupported = "unsupported"
)

// cell is one client's result for one feature, through the proxy, and (for a failure) directly
// against the brokers.
type cell struct {
	Result, Detail string
	Direct         string // "" (not run), cellPass, cellFail or a reason it could not be run
	DirectDetail   string
}

// noDirect are features whose endpoint is the proxy's own (its TLS listener, its token
// authentication): the e2e rig's brokers offer no equivalent to compare with.
var noDirect = map[string]string{
	"token-refresh": "the e2e rig's brokers do not authenticate",
	"tls":           "the e2e rig's brokers require a client certificate on their TLS port",
	"mtls":          "the e2e rig's brokers trust only the rig's CA",
}

// passNotes say how a client does a feature, where that matters to what its pass means.
var passNotes = map[string]map[string]string{
	"regex-polling": {"Java": "the Java client also opens a topic-list watcher when the CONNECTED it gets offers one, " +
		"so the topic may have been found either way; `regex-watcher` isolates the watcher",
		"Python": "pulsar-client's subscribe takes `pattern_auto_discovery_period` and never applies it " +
			"(apache/pulsar-client-python#171), so a pattern consumer polls every 60 s, the C++ client's default; " +
			"matrixclient.py sets the period on the consumer configuration itself"},
	"schema-json": {"Python": "pulsar-client sends the schema with its PRODUCER command; it never sends GET_OR_CREATE_SCHEMA"},
	"schema-avro": {"Python": "pulsar-client sends the schema with its PRODUCER command; it never sends GET_OR_CREATE_SCHEMA"},
}

// matrixEnv is what a client run gets: endpoints, credentials and the topics prepared for it.
type matrixEnv struct {
	URL, TLSURL, CAFile, MTLSURL, CertFile, KeyFile, AuthURL, TokenFile string
	Prefix, Partitioned, Terminated                                     string
	// The WebSocket column's endpoints (ws:// and wss:// bases), not passed to the programs.
	WSURL, WSSURL, MTLSWSSURL string
}

// args are env as the Java and Python programs take it (key=value), with the feature list.
func (e matrixEnv) args(features []string) []string {
	return []string{"url=" + e.URL, "tlsUrl=" + e.TLSURL, "caFile=" + e.CAFile, "mtlsUrl=" + e.MTLSURL,
		"certFile=" + e.CertFile, "keyFile=" + e.KeyFile, "authUrl=" + e.AuthURL, "tokenFile=" + e.TokenFile,
		"prefix=" + e.Prefix, "partitioned=" + e.Partitioned, "terminated=" + e.Terminated,
		"features=" + strings.Join(features, ",")}
}

// matrixClient is a column: a client that runs features and reports a cell for each.
type matrixClient struct {
	name    string
	version string // learnt from its first run
	run     func(ctx context.Context, env matrixEnv, features []string) (map[string]cell, string, error)
}

func TestClientFeatureMatrix(t *testing.T) {
	began := time.Now()
	committed := readCommittedMatrix(t)
	rigs := startMatrixProxies(t)
	clients := []*matrixClient{mxGoColumn(), mxJavaColumn(t), mxPythonColumn(t), mxWebSocketColumn()}
	cells := map[string]map[string]cell{} // feature -> client -> cell
	for _, row := range matrixRows {
		cells[row.id] = map[string]cell{}
	}
	var ids []string
	for _, row := range matrixRows {
		ids = append(ids, row.id)
	}
	for _, c := range clients {
		t0 := time.Now()
		got := rigs.measure(t, c, ids)
		for id, v := range got {
			cells[id][c.name] = v
		}
		t.Logf("%s client: %d features in %s", c.name, len(ids), time.Since(t0).Round(time.Second))
	}
	doc := renderMatrix(clients, cells)
	path := filepath.Join(proxyproc.RepoRoot(), "docs", "client-matrix.md")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s in %s:\n%s", path, time.Since(began).Round(time.Second), doc)
	for _, row := range matrixRows {
		for _, c := range clients {
			v := cells[row.id][c.name]
			if committed[row.id][c.name] == cellPass && v.Result != cellPass {
				t.Errorf("%s with the %s client passed in the committed matrix and now: %s %s", row.id, c.name, v.Result, v.Detail)
			}
			if v.Result == cellFail && v.Direct == cellPass {
				t.Errorf("%s with the %s client fails through the proxy (%s) but works directly against the brokers", row.id, c.name, v.Detail)
			}
		}
	}
}

// matrixProxies are the two proxies of the matrix run: the plain one (plaintext and TLS
// listeners, no authentication) that most features use, and one that authenticates (tokens on
// its plaintext listener, client certificates required on its TLS listener).
type matrixProxies struct {
	plain, auth   *proxy
	ca, cert, key string
	tokenFile     string
	prefix        string
}

func startMatrixProxies(t *testing.T) *matrixProxies {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	server := ca.Server(t, "proxy", time.Now().Add(24*time.Hour))
	alice := ca.Client(t, "alice")
	// Both serve the WebSocket API, on their HTTP and HTTPS listeners, for its column.
	const ws = "websocket:\n  enabled: true\nadmin:\n  listenHTTPS: \"127.0.0.1:0\"\n"
	plain := startProxy(t, brokerURLs(), fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n", server.CertFile, server.KeyFile)+ws)
	secret := filepath.Join(dir, "token.key")
	if err := newSecretKey(secret); err != nil {
		t.Fatal(err)
	}
	auth := startProxy(t, brokerURLs(), fmt.Sprintf(`tls:
  certFile: %q
  keyFile: %q
  clientCAFile: %q
  clientAuth: require
auth:
  enabled: true
  refreshTimeout: 5s
  token:
    secretKeyFile: %q
    leeway: 1s
  tls:
    roleFrom: cn
`, server.CertFile, server.KeyFile, ca.CertFile, secret)+ws)
	tokenFile := filepath.Join(dir, "token")
	renewTokens(t, secret, tokenFile)
	return &matrixProxies{plain: plain, auth: auth, ca: ca.CertFile, cert: alice.CertFile, key: alice.KeyFile,
		tokenFile: tokenFile, prefix: rig.UniqueName("matrix")}
}

// renewTokens keeps tokenFile holding a token for the role alice that expires 3 s after it was
// written, rewritten every second until the test ends, as a token sidecar would.
func renewTokens(t *testing.T, secretFile, tokenFile string) {
	write := func() error {
		tok, err := signHS256(secretFile, "alice", 3*time.Second)
		if err != nil {
			return err
		}
		if err := os.WriteFile(tokenFile+".tmp", []byte(tok), 0o600); err != nil {
			return err
		}
		return os.Rename(tokenFile+".tmp", tokenFile)
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := write(); err != nil {
					t.Errorf("renewing the token: %v", err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// env prepares the topics of one client run (through or, direct, around the proxy) and says
// where to connect.
func (m *matrixProxies) env(t *testing.T, client string, direct bool) matrixEnv {
	prefix := m.prefix + "-" + strings.ToLower(client)
	if direct {
		prefix += "-direct"
	}
	ctx := testCtx(t)
	part, _, err := theRig.CreateSpreadPartitionedTopic(ctx, strings.TrimPrefix(prefix, "persistent://public/default/")+"-part", 2)
	if err != nil {
		t.Fatal(err)
	}
	e := matrixEnv{URL: m.plain.PulsarURL, TLSURL: m.plain.PulsarTLSURL, CAFile: m.ca, MTLSURL: m.auth.PulsarTLSURL,
		CertFile: m.cert, KeyFile: m.key, AuthURL: m.auth.PulsarURL, TokenFile: m.tokenFile,
		Prefix: "persistent://public/default/" + prefix, Partitioned: part, Terminated: "persistent://public/default/" + prefix + "-terminated",
		WSURL: "ws" + strings.TrimPrefix(m.plain.HTTPURL, "http"), WSSURL: "wss" + strings.TrimPrefix(m.plain.HTTPSURL, "https"),
		MTLSWSSURL: "wss" + strings.TrimPrefix(m.auth.HTTPSURL, "https")}
	if direct {
		e.URL = theRig.Brokers[0].URL
		e.WSURL = "ws" + strings.TrimPrefix(theRig.Brokers[0].HTTP, "http")
		e.TLSURL, e.MTLSURL, e.AuthURL, e.WSSURL, e.MTLSWSSURL = "", "", "", "", ""
	}
	if err := prepareTerminated(ctx, e.URL, e.Terminated); err != nil {
		t.Fatal(err)
	}
	return e
}

// measure runs every feature with client c through the proxy, then the failed ones again
// directly against the brokers.
func (m *matrixProxies) measure(t *testing.T, c *matrixClient, ids []string) map[string]cell {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	refreshesBefore := m.auth.count(t, "pulsar_proxy_credential_refreshes_total", `result="ok"`)
	cells, version, err := c.run(ctx, m.env(t, c.name, false), ids)
	if err != nil {
		t.Errorf("%s client: %v", c.name, err)
	}
	c.version = version
	for id, v := range cells {
		if note := passNotes[id][c.name]; v.Result == cellPass && note != "" {
			v.Detail = note
			cells[id] = v
		}
	}
	// The token feature passes only when the proxy really challenged the client and it answered.
	refreshes := m.auth.count(t, "pulsar_proxy_credential_refreshes_total", `result="ok"`) - refreshesBefore
	if v := cells["token-refresh"]; v.Result == cellPass && refreshes < 1 {
		cells["token-refresh"] = cell{Result: cellFail, Detail: "messages flowed but the proxy counted no credential refresh"}
	} else if v.Result == cellPass {
		// The count varies from run to run: logged, not written, so the file only changes
		// when a result does.
		t.Logf("%s client: %v credential refreshes at the proxy during its run", c.name, refreshes)
		v.Detail = "the proxy challenged the client as its tokens expired and counted its answers as refreshes " +
			"(`pulsar_proxy_credential_refreshes_total{result=\"ok\"}` rose during its run)"
		cells["token-refresh"] = v
	}
	var failed []string
	for _, id := range ids {
		v, ok := cells[id]
		if !ok {
			cells[id] = cell{Result: cellFail, Detail: "the client program gave no verdict"}
			v = cells[id]
		}
		if v.Result != cellFail {
			continue
		}
		if why, ok := noDirect[id]; ok {
			v.Direct = "not compared: " + why
			cells[id] = v
			continue
		}
		failed = append(failed, id)
	}
	if len(failed) == 0 {
		return cells
	}
	direct, _, err := c.run(ctx, m.env(t, c.name, true), failed)
	if err != nil {
		t.Logf("%s client, direct run: %v", c.name, err)
	}
	for _, id := range failed {
		v := cells[id]
		d, ok := direct[id]
		if !ok {
			d = cell{Result: cellFail, Detail: "the client program gave no verdict"}
		}
		v.Direct, v.DirectDetail = d.Result, d.Detail
		cells[id] = v
	}
	return cells
}

// parseVerdicts reads the "MATRIX <feature> <result> <detail>" lines of a client program and
// its "MATRIX-CLIENT <version>" line.
func parseVerdicts(out string) (map[string]cell, string) {
	cells := map[string]cell{}
	version := ""
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "MATRIX-CLIENT "); ok {
			version = strings.TrimSpace(v)
			continue
		}
		rest, ok := strings.CutPrefix(line, "MATRIX ")
		if !ok {
			continue
		}
		f := strings.SplitN(strings.TrimSpace(rest), " ", 3)
		if len(f) < 2 {
			continue
		}
		c := cell{Result: f[1]}
		if len(f) == 3 {
			c.Detail = f[2]
		}
		cells[f[0]] = c
	}
	return cells, version
}
