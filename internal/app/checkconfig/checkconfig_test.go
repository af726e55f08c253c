package checkconfig

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/proxy"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// files is a complete set of what a configuration can name, all valid.
type files struct {
	dir                                    string
	cert, key, clientCA, brokerCA          string
	brokerCert, brokerKey                  string
	secretKey, publicKey, brokerToken      string
	policy                                 string
	otherCert, otherKey, garbage, notThere string
}

func makeFiles(t *testing.T) files {
	t.Helper()
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "test")
	server := ca.Server(t, "proxy", time.Now().Add(20*time.Hour))
	client := ca.Client(t, "proxy-client")
	other := certs.NewCA(t, filepath.Join(mkdir(t, dir, "other")), "other").Server(t, "other", time.Now().Add(20*time.Hour))
	f := files{
		dir: dir, cert: server.CertFile, key: server.KeyFile, clientCA: ca.CertFile, brokerCA: ca.CertFile,
		brokerCert: client.CertFile, brokerKey: client.KeyFile,
		secretKey: write(t, dir, "secret.key", strings.Repeat("k", 32)),
		publicKey: write(t, dir, "public.pem", publicKeyPEM(t)),
		policy:    write(t, dir, "policy.yaml", "superUserRoles: [admin]\nrules:\n  - roles: [app]\n    resources: [\"acme/orders/*\"]\n    actions: [lookup, produce]\n"),
		otherCert: other.CertFile, otherKey: other.KeyFile,
		garbage:  write(t, dir, "garbage", "not a certificate, a key or a token\n"),
		notThere: filepath.Join(dir, "missing.pem"),
	}
	f.brokerToken = write(t, dir, "broker.token", token(t, "pulsar-proxy", time.Now().Add(60*24*time.Hour)))
	return f
}

// publicKeyPEM is a fresh EC public key in PEM, as ReadPublicKey reads it.
func publicKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	d := filepath.Join(parts...)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func token(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// configYAML is a configuration that names every kind of file f holds.
func (f files) configYAML() string {
	return `listen:
  pulsar: 127.0.0.1:0
  http: 127.0.0.1:0
  pulsarTLS: 127.0.0.1:0
discovery:
  static:
    brokers: ["pulsar+ssl://broker-1.example:6651"]
tls:
  certFile: ` + f.cert + `
  keyFile: ` + f.key + `
  clientCAFile: ` + f.clientCA + `
  clientAuth: request
broker:
  tls:
    enabled: true
    trustCertsFile: ` + f.brokerCA + `
    certFile: ` + f.brokerCert + `
    keyFile: ` + f.brokerKey + `
auth:
  enabled: true
  token:
    secretKeyFile: ` + f.secretKey + `
  brokerClient:
    tokenFile: ` + f.brokerToken + `
authz:
  enabled: true
  policyFile: ` + f.policy + `
`
}

func runMain(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, environ, &out, &errOut, "test")
	// Connect reports each discovery provider's answer, or that it gave none.
	if !slices.Contains(args, "--connect") && (strings.Contains(errOut.String(), "broker(s): ") || strings.Contains(errOut.String(), "no broker within")) {
		t.Fatalf("discovery ran without --connect:\n%s", errOut.String())
	}
	return code, out.String(), errOut.String()
}

func TestGoodConfigPasses(t *testing.T) {
	f := makeFiles(t)
	path := write(t, f.dir, "config.yaml", f.configYAML())
	code, stdout, stderr := runMain(t, nil, path)
	if code != ExitOK {
		t.Fatalf("exit %d, want 0:\n%s", code, stderr)
	}
	for _, want := range []string{"tls.certFile", "broker.tls.certFile", "auth.token.secretKeyFile", "auth.brokerClient.tokenFile", "authz.policyFile", "exit 0"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the report does not mention %s:\n%s", want, stderr)
		}
	}
	// The effective configuration is printed, and loads again as the same configuration.
	printed := write(t, f.dir, "printed.yaml", stdout)
	cfg, err := config.Load(printed, nil)
	if err != nil {
		t.Fatalf("the printed configuration does not load: %v\n%s", err, stdout)
	}
	if cfg.TLS.CertFile != f.cert || !cfg.Authz.Enabled || cfg.Session.DrainTimeout != 30*time.Second {
		t.Errorf("the printed configuration differs: %+v", cfg)
	}
}

// TestEachKindOfBadFile: every file a configuration names is read as the proxy reads it; one
// that is missing, garbled, mismatched or expired fails the check (exit 1) and names its key.
func TestEachKindOfBadFile(t *testing.T) {
	f := makeFiles(t)
	expiredToken := write(t, f.dir, "expired.token", token(t, "pulsar-proxy", time.Now().Add(-time.Hour)))
	for _, c := range []struct {
		name, from, to, key string
	}{
		{"missing certificate", f.cert, f.notThere, "tls"},
		{"certificate that is not PEM", f.cert, f.garbage, "tls"},
		{"key of another certificate", f.key, f.otherKey, "tls"},
		{"client CA that is not PEM", "clientCAFile: " + f.clientCA, "clientCAFile: " + f.garbage, "tls"},
		{"missing broker CA", "trustCertsFile: " + f.brokerCA, "trustCertsFile: " + f.notThere, "broker.tls"},
		{"broker CA that is not PEM", "trustCertsFile: " + f.brokerCA, "trustCertsFile: " + f.garbage, "broker.tls"},
		{"broker client key of another certificate", f.brokerKey, f.otherKey, "broker.tls"},
		{"missing secret key", f.secretKey, f.notThere, "auth.token.secretKeyFile"},
		{"secret key too short for HS256", f.secretKey, write(t, f.dir, "short.key", strings.Repeat("k", 31)), "auth.token.secretKeyFile"},
		{"public key that is not PEM", "secretKeyFile: " + f.secretKey, "publicKeyFile: " + f.garbage, "auth.token.publicKeyFile"},
		{"missing broker token", f.brokerToken, f.notThere, "auth.brokerClient.tokenFile"},
		{"broker token that is not a JWT", f.brokerToken, f.garbage, "auth.brokerClient.tokenFile"},
		{"expired broker token", f.brokerToken, expiredToken, "auth.brokerClient.tokenFile"},
		{"missing policy", f.policy, f.notThere, "authz.policyFile"},
		{"policy that does not parse", f.policy, f.garbage, "authz.policyFile"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yml := f.configYAML()
			if !strings.Contains(yml, c.from) {
				t.Fatalf("the configuration has no %q", c.from)
			}
			path := write(t, t.TempDir(), "config.yaml", strings.Replace(yml, c.from, c.to, 1))
			code, _, stderr := runMain(t, nil, path)
			if code != ExitInvalid || !strings.Contains(stderr, "error   "+c.key) {
				t.Errorf("exit %d, want 1 with an error about %s:\n%s", code, c.key, stderr)
			}
		})
	}
}

func TestExpiredCertificate(t *testing.T) {
	f := makeFiles(t)
	path := write(t, f.dir, "config.yaml", f.configYAML())
	r := Check(path, nil, time.Now().Add(30*time.Hour)) // the test certificates last 20 hours
	if !r.Failed() || !strings.Contains(findings(r), "expired at") {
		t.Errorf("a check a day after the certificates expired passed:\n%s", findings(r))
	}
	r = Check(path, nil, time.Now())
	if r.Failed() || !strings.Contains(findings(r), "warning tls.certFile") {
		t.Errorf("a certificate expiring within 14 days is not a warning:\n%s", findings(r))
	}
}

func findings(r *Report) string {
	var b bytes.Buffer
	r.Write(&b)
	return b.String()
}

// TestRefusedConfiguration: what config.Load refuses (an unknown key, a bad value, one set
// in the environment) is reported line by line, exit 1, and no configuration is printed.
func TestRefusedConfiguration(t *testing.T) {
	dir := t.TempDir()
	base := "discovery:\n  static:\n    brokers: [\"pulsar://broker:6650\"]\n"
	for _, c := range []struct {
		name, yaml string
		environ    []string
		want       string
	}{
		{"unknown key", base + "sesion:\n  drainTimeout: 5s\n", nil, `unknown key "sesion"`},
		{"bad value", base + "session:\n  drainTimeout: -1s\n", nil, "session.drainTimeout"},
		{"no discovery", "log:\n  level: info\n", nil, "no broker discovery configured"},
		{"bad environment", base, []string{"PULSAR_PROXY_SESSION_MAX_CONNECTIONS=-3"}, "session.maxConnections"},
		{"not YAML", "discovery: [\n", nil, "config.yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := write(t, dir, "config.yaml", c.yaml)
			code, stdout, stderr := runMain(t, c.environ, path)
			if code != ExitInvalid || !strings.Contains(stderr, c.want) || stdout != "" {
				t.Errorf("exit %d (want 1), stdout %q, report:\n%s\nwant it to mention %q", code, stdout, stderr, c.want)
			}
		})
	}
	// The environment is applied: a file that is fine alone passes.
	path := write(t, dir, "config.yaml", base)
	if code, _, stderr := runMain(t, []string{"PULSAR_PROXY_SESSION_MAX_CONNECTIONS=10"}, path); code != ExitOK {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
	if code, stdout, _ := runMain(t, []string{"PULSAR_PROXY_SESSION_MAX_CONNECTIONS=10"}, path, "--quiet"); code != ExitOK || stdout != "" {
		t.Errorf("--quiet: exit %d, printed %q", code, stdout)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"a.yaml", "b.yaml"}, {"--no-such-flag", "a.yaml"}, {"--connect-timeout", "0s", "a.yaml"}} {
		if code, _, _ := runMain(t, nil, args...); code != ExitUsage {
			t.Errorf("check-config %q: exit %d, want 2", args, code)
		}
	}
}

func TestSecretsAreRedacted(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "config.yaml", `discovery:
  consul:
    service: pulsar
    address: https://operator:hunter2@consul.example:8501
    token: consul-acl-token-value
auth:
  brokerClient:
    token: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwcm94eSJ9.c2lnbmF0dXJl
`)
	code, stdout, stderr := runMain(t, nil, path)
	if code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	for _, secret := range []string{"consul-acl-token-value", "eyJhbGciOiJIUzI1NiJ9", "hunter2"} {
		if strings.Contains(stdout, secret) {
			t.Errorf("the printed configuration shows %q:\n%s", secret, stdout)
		}
	}
	if strings.Count(stdout, redactedValue) != 2 || !strings.Contains(stdout, "operator:redacted@consul.example") {
		t.Errorf("want both tokens and the URL's password redacted:\n%s", stdout)
	}
}

// TestConnect: with --connect, a broker that answers CONNECT passes; a stopped one (nothing
// listening) is exit 3 with the reason. Discovery and the CONNECT are the proxy's own
// (internal/app/proxy). (The end-to-end test does the same against the rig's brokers; the
// broker here is a few lines that answer CONNECTED.)
func TestConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go answerConnects(ln)
	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stoppedAddr := stopped.Addr().String()
	stopped.Close()

	for _, c := range []struct {
		name   string
		addrs  []string
		code   int
		report string
	}{
		{"answering broker", []string{ln.Addr().String()}, ExitOK, "CONNECTED (server \"fake-broker\""},
		{"stopped broker", []string{stoppedAddr}, ExitConnection, "no broker completed a CONNECT"},
		{"one of two stopped", []string{stoppedAddr, ln.Addr().String()}, ExitOK, "CONNECT failed: unreachable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var urls []string
			for _, a := range c.addrs {
				urls = append(urls, "pulsar://"+a)
			}
			path := write(t, t.TempDir(), "config.yaml", "discovery:\n  static:\n    brokers: [\""+strings.Join(urls, "\", \"")+"\"]\n")
			var ports []string
			for _, a := range c.addrs {
				_, port, _ := net.SplitHostPort(a)
				ports = append(ports, port)
			}
			var out, errOut bytes.Buffer
			code := Main([]string{path, "--connect", "--connect-timeout", "5s"}, []string{"PULSAR_PROXY_BROKER_ALLOWED_PORTS=" + strings.Join(ports, ",")}, &out, &errOut, "test")
			if code != c.code || !strings.Contains(errOut.String(), c.report) {
				t.Errorf("exit %d (want %d), report:\n%s\nwant it to say %q", code, c.code, errOut.String(), c.report)
			}
		})
	}
}

// answerConnects answers each connection's CONNECT with CONNECTED, then closes it.
func answerConnects(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := frame.NewReader(c, 1<<20).ReadCommand(); err != nil {
				return
			}
			frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(),
				Connected: &pb.CommandConnected{ServerVersion: proto.String("fake-broker"), ProtocolVersion: proto.Int32(21)}})
			c.Read(make([]byte, 1))
		}()
	}
}

// TestMetadataStoreFiles: the files of discovery.metadataStore are checked as the others are.
func TestMetadataStoreFiles(t *testing.T) {
	f := makeFiles(t)
	digest := write(t, f.dir, "zk-digest", "proxy:secret\n")
	for _, c := range []struct{ store, want string }{
		{"digestFile: " + digest + ", tls: {enabled: true, trustCertsFile: " + f.brokerCA + "}", ""},
		{"digestFile: " + f.notThere, "error   discovery.metadataStore.digestFile"},
		{"digestFile: " + f.garbage, "error   discovery.metadataStore.digestFile"},
		{"tls: {enabled: true, trustCertsFile: " + f.garbage + "}", "error   discovery.metadataStore.tls.trustCertsFile"},
	} {
		yml := "discovery: {metadataStore: {url: \"zk:127.0.0.1:2181\", " + c.store + "}}\n"
		r := Check(write(t, t.TempDir(), "config.yaml", yml), nil, time.Now())
		if got := findings(r); r.Failed() != (c.want != "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: failed %v, want %q:\n%s", c.store, r.Failed(), c.want, got)
		}
	}
}

// check-config refuses the SNI listener beside authentication (config.Load's rule) and warns
// what the SNI plane cannot do where it is on.
func TestCheckSNI(t *testing.T) {
	dir := t.TempDir()
	base := "listen: {pulsarSNI: \"127.0.0.1:0\"}\ndiscovery: {static: {brokers: [\"pulsar+ssl://b-1.example:6651\"]}}\nbroker: {tls: {enabled: true}}\n"
	r := Check(write(t, dir, "sni.yaml", base+"sni: {proxyProtocol: v2}\n"), nil, time.Now())
	if r.Failed() {
		t.Fatalf("an SNI listener is refused: %v", r.Findings)
	}
	for _, key := range []string{"listen.pulsarSNI", "sni.serviceNames", "sni.proxyProtocol"} {
		if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Key == key && f.Severity == Warning }) {
			t.Errorf("no warning on %s: %v", key, r.Findings)
		}
	}
	r = Check(write(t, dir, "auth.yaml", base+"auth: {enabled: true, token: {secretKeyFile: k}}\n"), nil, time.Now())
	if !r.Failed() || !slices.ContainsFunc(r.Findings, func(f Finding) bool { return strings.Contains(f.Message, "cannot be on with auth.enabled") }) {
		t.Fatalf("SNI with authentication: %v", r.Findings)
	}
}

// TestStartWarnings: check-config prints every warning the proxy logs as it starts (the one
// list, proxy.Warnings) and each setting another implied, and the configuration is still
// valid (exit 0). Here: the admin API and the Pulsar listener open to every address without
// authentication, PROXY headers trusted from every source, and broker.multiplex alone.
func TestStartWarnings(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "config.yaml", `listen: {pulsar: "0.0.0.0:6650", http: ":8080"}
discovery: {static: {brokers: ["pulsar://broker:6650"]}}
proxyProtocol: {trustedCIDRs: [10.0.0.0/8, "::/0"]}
broker: {multiplex: true}
`)
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain(t, nil, path, "--quiet")
	if code != ExitOK {
		t.Fatalf("exit %d, want 0:\n%s", code, stderr)
	}
	ws := proxy.Warnings(cfg)
	for _, key := range []string{"listen.pulsar", "listen.http", "proxyProtocol.trustedCIDRs[1]", "discovery.static.webBrokers"} {
		if !slices.ContainsFunc(ws, func(w config.Warning) bool { return w.Key == key }) {
			t.Errorf("the proxy does not warn of %s: %+v", key, ws)
		}
	}
	for _, w := range ws {
		if line := (Finding{Warning, w.Key, w.Message}).String(); !strings.Contains(stderr, line+"\n") {
			t.Errorf("the report lacks %q:\n%s", line, stderr)
		}
	}
	for _, line := range []string{"ok      session.passthrough: false, implied by broker.multiplex: true",
		"ok      proxyProtocol.enabled: true, implied by proxyProtocol.trustedCIDRs",
		fmt.Sprintf("(0 error(s), %d warning(s)); exit 0", len(ws))} {
		if !strings.Contains(stderr, line) {
			t.Errorf("the report lacks %q:\n%s", line, stderr)
		}
	}
}
