package convert

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

// convertFile expands ${name} in the proxy.conf at path with values, converts it, and loads
// the result with the proxy's own config.Load (failing the test when it does not validate).
func convertFile(t *testing.T, path string, values map[string]string) (*Result, *config.Config, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf := os.Expand(string(b), func(k string) string {
		v, ok := values[k]
		if !ok {
			t.Fatalf("%s names ${%s}, which the test does not fill in", path, k)
		}
		return v
	})
	res, err := Convert(strings.NewReader(conf), filepath.Base(path))
	if err != nil {
		t.Fatal(err)
	}
	var report bytes.Buffer
	res.WriteReport(&report, filepath.Base(path))
	if !res.Valid() {
		t.Fatalf("the converted configuration does not validate:\n%s\n%s", res.YAML, report.String())
	}
	out := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(out, res.YAML, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	noSilentDrops(t, conf, res)
	return res, cfg, out
}

// noSilentDrops: every key the file sets is in the report.
func noSilentDrops(t *testing.T, conf string, res *Result) {
	t.Helper()
	props, _, err := readProperties(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range props {
		if !slices.ContainsFunc(res.Notes, func(n Note) bool { return n.Key == p.Key }) {
			t.Errorf("%s (line %d) is neither mapped nor reported", p.Key, p.Line)
		}
	}
}

func note(t *testing.T, res *Result, key string) Note {
	t.Helper()
	for _, n := range res.Notes {
		if n.Key == key {
			return n
		}
	}
	t.Fatalf("no note about %s", key)
	return Note{}
}

// checkConfigPasses runs check-config's checks on the converted file.
func checkConfigPasses(t *testing.T, path string) {
	t.Helper()
	r := checkconfig.Check(path, nil, time.Now())
	var b bytes.Buffer
	r.Write(&b)
	if r.Failed() {
		t.Fatalf("check-config refuses the converted configuration:\n%s", b.String())
	}
}

// TestBenchmarksJavaProxyConf converts the configuration the benchmark really runs Apache's
// proxy with (bench/java-proxy.conf; test/e2e then runs the result against the rig).
func TestBenchmarksJavaProxyConf(t *testing.T) {
	res, cfg, path := convertFile(t, filepath.Join("..", "..", "..", "bench", "java-proxy.conf"), map[string]string{
		"clusterName": "standalone", "brokerServiceURL": "pulsar://127.0.0.1:16650",
		"brokerWebServiceURL": "http://127.0.0.1:18080", "servicePort": "16700", "webServicePort": "16701",
	})
	checkConfigPasses(t, path)
	if cfg.Listen.Pulsar != "127.0.0.1:16700" || cfg.Listen.HTTP != "127.0.0.1:16701" {
		t.Errorf("listen %+v", cfg.Listen)
	}
	if !slices.Equal(cfg.Discovery.Static.Brokers, []string{"pulsar://127.0.0.1:16650"}) {
		t.Errorf("brokers %v", cfg.Discovery.Static.Brokers)
	}
	if !slices.Contains(cfg.Broker.AllowedPorts, 16650) || cfg.Session.MaxConnections != 100000 || !cfg.Session.Passthrough {
		t.Errorf("allowedPorts %v, maxConnections %d, passthrough %v", cfg.Broker.AllowedPorts, cfg.Session.MaxConnections, cfg.Session.Passthrough)
	}
	if cfg.Broker.DialTimeout != 10*time.Second {
		t.Errorf("broker.dialTimeout %s, want Apache's default 10s", cfg.Broker.DialTimeout)
	}
	if n := note(t, res, "brokerWebServiceURL"); n.Review || n.To != "discovery.static.webBrokers" {
		t.Errorf("brokerWebServiceURL: %+v", n)
	}
	if !slices.Equal(cfg.Discovery.Static.WebBrokers, []string{"http://127.0.0.1:18080"}) || !cfg.Admin.Enabled {
		t.Errorf("webBrokers %v, admin enabled %v: the admin API should reach the broker's web service", cfg.Discovery.Static.WebBrokers, cfg.Admin.Enabled)
	}
	// Apache's proxy has no web port list: the web URL's port joins Pulsar's two.
	if !slices.Equal(cfg.Broker.AllowedWebPorts, []int{8080, 8443, 18080}) ||
		!bytes.Contains(res.YAML, []byte("# from brokerWebServiceURL=http://127.0.0.1:18080, beside Pulsar's web ports 8080 and 8443")) {
		t.Errorf("allowedWebPorts %v:\n%s", cfg.Broker.AllowedWebPorts, res.YAML)
	}
	if n := note(t, res, "brokerProxyAllowedTargetPorts"); !n.Review || n.To != "broker.allowedPorts" {
		t.Errorf("brokerProxyAllowedTargetPorts=*: %+v", n)
	}
	if !bytes.Contains(res.YAML, []byte("# from brokerServiceURL=pulsar://127.0.0.1:16650")) {
		t.Errorf("the written file does not name where its settings came from:\n%s", res.YAML)
	}
}

// TestEveryKeyOf4x converts a proxy.conf that sets every setting of Apache Pulsar's 4.x proxy;
// the result passes check-config with its files in place.
func TestEveryKeyOf4x(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, mkdir(t, dir, "client"), "client")
	server := ca.Server(t, "proxy", time.Now().Add(20*time.Hour))
	brokerCA := certs.NewCA(t, mkdir(t, dir, "broker"), "broker")
	client := brokerCA.Client(t, "pulsar-proxy")
	link := func(from, to string) {
		if err := os.Link(from, filepath.Join(dir, to)); err != nil {
			t.Fatal(err)
		}
	}
	link(server.CertFile, "proxy.pem")
	link(server.KeyFile, "proxy-key.pem")
	link(ca.CertFile, "client-ca.pem")
	link(brokerCA.CertFile, "broker-ca.pem")
	link(client.CertFile, "proxy-client.pem")
	link(client.KeyFile, "proxy-client-key.pem")
	// A secret key as `pulsar tokens create-secret-key --output` writes it: raw bytes.
	secret := bytes.Repeat([]byte{0xf0, 0x9f, 0x94, 0x91}, 8)
	writeFile(t, filepath.Join(dir, "secret.key"), string(secret))
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "pulsar-proxy"}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "proxy.token"), tok)

	res, cfg, path := convertFile(t, filepath.Join("testdata", "proxy-4.x-all-keys.conf"), map[string]string{"dir": dir})
	checkConfigPasses(t, path)

	// Every setting the converter knows is in the file (test/rig checks apacheKeys against
	// the 4.0.8 jar's ProxyConfiguration, TestEverySettingOf4x against the 4.x list).
	b, _ := os.ReadFile(filepath.Join("testdata", "proxy-4.x-all-keys.conf"))
	props, _, _ := readProperties(bytes.NewReader(b))
	for k := range apacheKeys {
		if !slices.ContainsFunc(props, func(p property) bool { return p.Key == k }) {
			t.Errorf("testdata/proxy-4.x-all-keys.conf does not set %s", k)
		}
	}

	want := []struct {
		what      string
		got, want any
	}{
		{"listen.pulsar", cfg.Listen.Pulsar, "127.0.0.1:6650"},
		{"listen.pulsarTLS", cfg.Listen.PulsarTLS, "127.0.0.1:6651"},
		{"listen.http", cfg.Listen.HTTP, "127.0.0.1:8080"},
		{"tls.certFile", cfg.TLS.CertFile, filepath.Join(dir, "proxy.pem")},
		{"tls.clientCAFile", cfg.TLS.ClientCAFile, filepath.Join(dir, "client-ca.pem")},
		{"tls.clientAuth", cfg.TLS.ClientAuth, "request"},
		{"tls.minVersion", cfg.TLS.MinVersion.String(), "1.2"},
		{"tls.cipherSuites", strings.Join(cfg.TLS.CipherSuites, ","), "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"},
		{"broker.tls.enabled", cfg.Broker.TLS.Enabled, true},
		{"broker.tls.trustCertsFile", cfg.Broker.TLS.TrustCertsFile, filepath.Join(dir, "broker-ca.pem")},
		{"broker.tls.certFile", cfg.Broker.TLS.CertFile, filepath.Join(dir, "proxy-client.pem")},
		{"broker.tls.skipHostnameVerification", cfg.Broker.TLS.SkipHostnameVerification, false},
		{"broker.tls.minVersion", cfg.Broker.TLS.MinVersion.String(), "1.2"},
		{"discovery.static.brokers", strings.Join(cfg.Discovery.Static.Brokers, " "),
			"pulsar+ssl://pulsar-broker-0.pulsar-broker.pulsar.svc.cluster.local:6651 pulsar+ssl://pulsar-broker-1.pulsar-broker.pulsar.svc.cluster.local:6651"},
		{"broker.allowedPorts", cfg.Broker.AllowedPorts, []int{6651}},
		{"broker.allowedHosts", strings.Join(cfg.Broker.AllowedHosts, " "), "pulsar-broker-*.pulsar-broker.pulsar.svc.cluster.local"},
		{"broker.dialTimeout", cfg.Broker.DialTimeout, 7 * time.Second},
		{"session.keepAliveInterval", cfg.Session.KeepAliveInterval, 20 * time.Second},
		{"session.passthrough", cfg.Session.Passthrough, false},
		{"session.maxConnections", cfg.Session.MaxConnections, 20000},
		{"session.maxConnectionsPerIP", cfg.Session.MaxConnectionsPerIP, 100},
		{"session.maxFrameSize", cfg.Session.MaxFrameSize, 5242880 + 10240},
		{"session.maxLookupsInFlight", cfg.Session.MaxLookupsInFlight, 20000},
		{"auth.token.leeway", cfg.Auth.Token.Leeway, 30 * time.Second},
		{"log.sessionSummary", cfg.Log.SessionSummary, "info"},
		{"proxyProtocol.enabled", cfg.ProxyProtocol.Enabled, true},
		{"proxyProtocol.trustedCIDRs", len(cfg.ProxyProtocol.TrustedCIDRs), 2},
		{"auth.enabled", cfg.Auth.Enabled, true},
		{"auth.anonymousRole", cfg.Auth.AnonymousRole, "anonymous"},
		{"auth.forwardClientCredentials", cfg.Auth.ForwardClientCredentials, true},
		{"auth.token.secretKeyFile", cfg.Auth.Token.SecretKeyFile, filepath.Join(dir, "secret.key")},
		{"auth.token.audience", cfg.Auth.Token.Audience, "pulsar"},
		{"auth.brokerClient.tokenFile", cfg.Auth.BrokerClient.TokenFile, filepath.Join(dir, "proxy.token")},
		{"authz.enabled", cfg.Authz.Enabled, false},
		{"admin.listenHTTPS", cfg.Admin.ListenHTTPS, "127.0.0.1:8443"},
		{"admin.functionWorkers", strings.Join(cfg.Admin.FunctionWorkers, " "), "https://pulsar-function.pulsar.svc.cluster.local:6751"},
		{"discovery.static.webBrokers", len(cfg.Discovery.Static.WebBrokers), 0},
		{"broker.allowedWebPorts", cfg.Broker.AllowedWebPorts, []int{8080, 8443}},
		{"discovery.metadataStore.url", cfg.Discovery.MetadataStore.URL, "zk:zk-0.zk:2181,zk-1.zk:2181/pulsar"},
		{"discovery.metadataStore.sessionTimeout", cfg.Discovery.MetadataStore.SessionTimeout, 30 * time.Second},
	}
	for _, w := range want {
		if !equal(w.got, w.want) {
			t.Errorf("%s = %v, want %v", w.what, w.got, w.want)
		}
	}
	// What could not be carried over as it was is flagged for review, with the reason.
	for key, why := range map[string]string{
		"brokerProxyAllowedIPAddresses": "no address or network allow-list",
		"haProxyProtocolEnabled":        "narrow proxyProtocol.trustedCIDRs",
		"authorizationEnabled":          "original_principal",
		"superUserRoles":                "superUserRoles",
		"brokerProxyAllowedHostNames":   "never crosses a dot",
		"tlsCiphers":                    "TLS 1.3 suites",
		"brokerWebServiceURLTLS":        "1 web service URLs for 2 broker URLs",
	} {
		if n := note(t, res, key); !n.Review || !strings.Contains(n.Reason, why) {
			t.Errorf("%s: %+v, want it flagged for review saying %q", key, n, why)
		}
	}
}

func equal(a, b any) bool {
	if x, ok := a.([]int); ok {
		y, _ := b.([]int)
		return slices.Equal(x, y)
	}
	return a == b
}

// TestApachesDefaults: the file Apache ships (every key at its default) converts to a
// configuration that needs discovery, and says so (exit 3).
func TestApachesDefaults(t *testing.T) {
	var conf strings.Builder
	for k, info := range apacheKeys {
		conf.WriteString(k + "=" + info.def + "\n")
	}
	path := filepath.Join(t.TempDir(), "proxy.conf")
	writeFile(t, path, conf.String())
	var out, errOut bytes.Buffer
	code := Main([]string{path}, nil, &out, &errOut)
	if code != ExitNeedsInput || !strings.Contains(errOut.String(), "no broker discovery configured") {
		t.Fatalf("exit %d, want 3 naming the missing discovery:\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "discovery.metadataStore.url") {
		t.Errorf("the report does not name the metadata store provider among the ways to discover brokers:\n%s", errOut.String())
	}
	res, _ := Convert(strings.NewReader(conf.String()), "proxy.conf")
	noSilentDrops(t, conf.String(), res)
	for _, n := range res.Notes {
		if n.Review {
			t.Errorf("a default flagged for review: %+v", n)
		}
	}
}

// TestKeyTable: every setting without a reason is one the converter maps, and the reverse.
func TestKeyTable(t *testing.T) {
	for _, k := range mappedKeys {
		info, ok := apacheKeys[k]
		if !ok || info.reason != "" {
			t.Errorf("mapped key %s: in the table %v, reason %q", k, ok, info.reason)
		}
	}
	for k, info := range apacheKeys {
		if info.reason == "" && !slices.Contains(mappedKeys, k) {
			t.Errorf("%s has no reason and is not mapped", k)
		}
	}
}

func TestMappings(t *testing.T) {
	base := "brokerServiceURL=pulsar://broker:6650\n"
	// A token check-config reads as a JWT (it cannot verify it: the brokers hold the key).
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "pulsar-proxy"}).SignedString([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, conf string
		yaml       []string // lines the output must hold
		review     string   // a key that must be flagged for review
		valid      bool
	}{
		{"token parameters inline", "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\nbrokerClientAuthenticationParameters=token:" + tok + "\n",
			[]string{"token: " + tok}, "brokerClientAuthenticationParameters", true},
		{"token parameters as JSON", `brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken` + "\n" + `brokerClientAuthenticationParameters={"token":"` + tok + `"}` + "\n",
			[]string{"token: " + tok}, "", true},
		{"a token that is not a JWT", "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\nbrokerClientAuthenticationParameters=token:abc.def.ghi\n",
			[]string{"token: abc.def.ghi"}, "brokerClientAuthenticationParameters", false},
		// Its files are not here, so check-config refuses it (valid false); the mapping holds.
		{"TLS client certificate", "tlsEnabledWithBroker=true\nbrokerServiceURLTLS=pulsar+ssl://broker:6651\nbrokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationTls\nbrokerClientAuthenticationParameters=tlsCertFile:/c.pem,tlsKeyFile:/k.pem\ntlsHostnameVerificationEnabled=true\n",
			[]string{"certFile: /c.pem", "keyFile: /k.pem", "enabled: true"}, "", false},
		{"a redirect of Apache's HTTP proxy", "httpReverseProxy.grafana.path=/grafana\nhttpReverseProxy.grafana.proxyTo=http://grafana:3000\n",
			nil, "httpReverseProxy.grafana.proxyTo", true},
		{"no plain HTTP port", "webServicePort=\n", []string{`http: "0.0.0.0:8080"`}, "webServicePort", true},
		{"lookups in flight", "maxConcurrentLookupRequests=2000\n", []string{"maxLookupsInFlight: 2000"}, "", true},
		{"no lookup allowed", "maxConcurrentLookupRequests=0\n", nil, "maxConcurrentLookupRequests", true},
		{"token clock skew", "authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken,org.apache.pulsar.broker.authentication.oidc.AuthenticationProviderOpenID\n" +
			"tokenAllowedClockSkewSeconds=30\nopenIDAcceptedTimeLeewaySeconds=10\nopenIDAllowedTokenIssuers=https://idp\n",
			[]string{"leeway: 30s"}, "", false},
		{"host names not verified", "tlsEnabledWithBroker=true\nbrokerServiceURLTLS=pulsar+ssl://broker\n",
			[]string{"skipHostnameVerification: true", `brokers: ["pulsar+ssl://broker:6651"]`}, "tlsHostnameVerificationEnabled", true},
		{"unsupported plugin", "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2\nbrokerClientAuthenticationParameters={\"issuerUrl\":\"x\"}\n",
			nil, "brokerClientAuthenticationPlugin", true},
		{"port pattern", "brokerProxyAllowedTargetPorts=665*\n", []string{"allowedPorts: [665, 6650, 6651, 6652, 6653, 6654, 6655, 6656, 6657, 6658, 6659]"}, "", true},
		{"no plaintext port", "servicePort=\n", []string{`pulsar: "0.0.0.0:6650"`}, "servicePort", true},
		{"PROXY protocol", "haProxyProtocolEnabled=true\n", []string{"enabled: true", `trustedCIDRs: [0.0.0.0/0, "::/0"]`}, "haProxyProtocolEnabled", true},
		{"IPv6 bind", "bindAddress=::\n", []string{`pulsar: "[::]:6650"`, `http: "[::]:8080"`}, "", true},
		{"keep-alive off", "keepAliveIntervalSeconds=0\n", nil, "keepAliveIntervalSeconds", true},
		{"OpenID Connect", "authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.oidc.AuthenticationProviderOpenID\nopenIDAllowedTokenIssuers=https://idp/realms/x\nopenIDAllowedAudiences=a,b\n",
			[]string{`issuers: ["https://idp/realms/x"]`, "audience: a"}, "openIDAllowedTokenIssuers", false},
		{"inline secret key", "authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\ntokenSecretKey=data:;base64,c2VjcmV0\n",
			[]string{"enabled: true"}, "tokenSecretKey", false},
		{"unknown key", "someUnknownSetting=1\n", nil, "someUnknownSetting", true},
		{"Java client setting", "brokerClient_operationTimeoutMs=1000\n", nil, "brokerClient_operationTimeoutMs", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := Convert(strings.NewReader(base+c.conf), "proxy.conf")
			if err != nil {
				t.Fatal(err)
			}
			var report bytes.Buffer
			res.WriteReport(&report, "proxy.conf")
			for _, line := range c.yaml {
				if !bytes.Contains(res.YAML, []byte(line)) {
					t.Errorf("no %q in:\n%s", line, res.YAML)
				}
			}
			if c.review != "" && !note(t, res, c.review).Review {
				t.Errorf("%s is not flagged for review:\n%s", c.review, report.String())
			}
			if res.Valid() != c.valid {
				t.Errorf("valid %v, want %v:\n%s\n%s", res.Valid(), c.valid, res.YAML, report.String())
			}
			noSilentDrops(t, base+c.conf, res)
			for _, secret := range []string{"c2VjcmV0"} {
				if strings.Contains(report.String(), secret) {
					t.Errorf("the report shows a secret:\n%s", report.String())
				}
			}
		})
	}
}

func TestProperties(t *testing.T) {
	in := "# comment\n! also a comment\n  a = 1\nb:2\nc 3\nd=x\\\n   y\ne=tab\\tand\\u0041\nf=\na=last\n"
	props, dups, err := readProperties(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range props {
		got[p.Key] = p.Value
	}
	want := map[string]string{"a": "last", "b": "2", "c": "3", "d": "xy", "e": "tab\tandA", "f": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(dups) != 1 || dups[0].Value != "1" {
		t.Errorf("duplicates %+v", dups)
	}
}

func TestMain_(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "proxy.conf")
	writeFile(t, in, "brokerServiceURL=pulsar://broker:6650\n")
	out := filepath.Join(dir, "config.yaml")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"-o", out, in}, nil, &stdout, &stderr); code != ExitOK || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q:\n%s", code, stdout.String(), stderr.String())
	}
	if _, err := config.Load(out, nil); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := Main([]string{"-"}, strings.NewReader("brokerServiceURL=pulsar://broker:6650\n"), &stdout, &stderr); code != ExitOK || !strings.Contains(stdout.String(), "pulsar://broker:6650") {
		t.Errorf("from standard input: exit %d, %q", code, stdout.String())
	}
	for _, args := range [][]string{{}, {"a", "b"}, {"-x", in}} {
		if code := Main(args, nil, &stdout, &stderr); code != ExitUsage {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code := Main([]string{filepath.Join(dir, "missing.conf")}, nil, &stdout, &stderr); code != ExitFailed {
		t.Errorf("a missing file: exit %d, want 1", code)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	d := filepath.Join(parts...)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestMetadataStore: Apache's proxy finds brokers in its metadata store; the converted file
// does the same with discovery.metadataStore, and says what it cannot carry over.
func TestMetadataStore(t *testing.T) {
	conv := func(conf string) (*Result, *config.Config) {
		t.Helper()
		res, err := Convert(strings.NewReader(conf), "proxy.conf")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(writeTemp(t, res.YAML), nil)
		if err != nil && len(res.Problems) == 0 {
			t.Fatalf("%v\n%s", err, res.YAML)
		}
		return res, cfg
	}
	res, cfg := conv("metadataStoreUrl=zk:zk-0:2181,zk-1:2181/pulsar\nmetadataStoreSessionTimeoutMillis=12000\nconfigurationMetadataStoreUrl=zk:zk-0:2181/global\n")
	if m := cfg.Discovery.MetadataStore; m.URL != "zk:zk-0:2181,zk-1:2181/pulsar" || m.SessionTimeout != 12*time.Second {
		t.Errorf("%+v", m)
	}
	if n := note(t, res, "metadataStoreUrl"); n.To != "discovery.metadataStore.url" || n.Review {
		t.Errorf("%+v", n)
	}
	if n := note(t, res, "configurationMetadataStoreUrl"); n.Review || !strings.Contains(n.Reason, "policies") {
		t.Errorf("%+v", n)
	}
	// The older keys, when the newer are not set.
	_, cfg = conv("zookeeperServers=zk-0:2181\nzookeeperSessionTimeoutMs=8000\n")
	if m := cfg.Discovery.MetadataStore; m.URL != "zk-0:2181" || m.SessionTimeout != 8*time.Second {
		t.Errorf("%+v", m)
	}
	res, _ = conv("metadataStoreUrl=zk:a:2181\nzookeeperServers=b:2181\n")
	if n := note(t, res, "zookeeperServers"); n.To != "" || !strings.Contains(n.Reason, "metadataStoreUrl is set and wins") {
		t.Errorf("%+v", n)
	}
	// Other stores cannot be read: flagged, and discovery is still needed.
	res, _ = conv("metadataStoreUrl=etcd:http://etcd:2379\n")
	if n := note(t, res, "metadataStoreUrl"); !n.Review || !strings.Contains(n.Reason, "ZooKeeper only") {
		t.Errorf("%+v", n)
	}
	if !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "no broker discovery configured") }) {
		t.Errorf("problems %q", res.Problems)
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, p, string(b))
	return p
}

// TestMetadataStoreDiscovery: Apache's proxy finds its brokers in the local metadata store
// (metadataStoreUrl, or the older zookeeperServers; it needs configurationMetadataStoreUrl too,
// which falls back to the local store). The converted file does the same with
// discovery.metadataStore (ZooKeeper), check-config passes it, and the configuration store is
// reported for what it is: the policies' store, never where brokers are found.
func TestMetadataStoreDiscovery(t *testing.T) {
	for _, c := range []struct {
		name, conf string
		url        string // discovery.metadataStore.url, "" for none
		notes      map[string]string
		review     []string // keys flagged for review
	}{
		{"metadataStoreUrl and the same configuration store",
			"metadataStoreUrl=zk:zk-0:2181,zk-1:2181/pulsar\nconfigurationMetadataStoreUrl=zk:zk-0:2181,zk-1:2181/pulsar\n",
			"zk:zk-0:2181,zk-1:2181/pulsar",
			map[string]string{"metadataStoreUrl": "discovery.metadataStore.url", "configurationMetadataStoreUrl": "policies"}, nil},
		{"zookeeperServers, the older key",
			"zookeeperServers=zk-0:2181,zk-1:2181\nconfigurationStoreServers=zk-0:2181,zk-1:2181\n",
			"zk-0:2181,zk-1:2181",
			map[string]string{"zookeeperServers": "discovery.metadataStore.url", "configurationStoreServers": "policies"}, nil},
		{"metadataStoreUrl wins over zookeeperServers",
			"metadataStoreUrl=zk:a:2181\nzookeeperServers=b:2181\n", "zk:a:2181",
			map[string]string{"zookeeperServers": "metadataStoreUrl is set and wins"}, nil},
		{"a configuration store alone finds no broker",
			"configurationMetadataStoreUrl=zk:zk-0:2181/pulsar\n", "",
			map[string]string{"configurationMetadataStoreUrl": "metadataStoreUrl"}, []string{"configurationMetadataStoreUrl"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			confPath := filepath.Join(dir, "proxy.conf")
			writeFile(t, confPath, c.conf)
			out := filepath.Join(dir, "config.yaml")
			var stdout, stderr bytes.Buffer
			code := Main([]string{"-o", out, confPath}, nil, &stdout, &stderr)
			res, err := Convert(strings.NewReader(c.conf), "proxy.conf")
			if err != nil {
				t.Fatal(err)
			}
			noSilentDrops(t, c.conf, res)
			for key, want := range c.notes {
				if n := note(t, res, key); !strings.Contains(n.To+" "+n.Reason, want) || n.Review != slices.Contains(c.review, key) {
					t.Errorf("%s: %+v, want %q (review %v)", key, n, want, slices.Contains(c.review, key))
				}
			}
			if c.url == "" {
				if code != ExitNeedsInput || !strings.Contains(stderr.String(), "no broker discovery configured") {
					t.Errorf("exit %d, want %d naming the missing discovery:\n%s", code, ExitNeedsInput, stderr.String())
				}
				return
			}
			r, findings := checkConfig(t, out)
			if code != ExitOK || r.Failed() {
				t.Fatalf("exit %d, check-config:\n%s\n%s", code, stderr.String(), findings)
			}
			if got := r.Config.Discovery.MetadataStore.URL; got != c.url {
				t.Errorf("discovery.metadataStore.url %q, want %q", got, c.url)
			}
		})
	}
	// The help says so too.
	if strings.Contains(Usage, "no counterpart") || !strings.Contains(Usage, "discovery.metadataStore") {
		t.Errorf("the usage does not say metadataStoreUrl becomes discovery.metadataStore:\n%s", Usage)
	}
}
