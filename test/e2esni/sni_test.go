package e2esni

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// startSNIProxy runs an SNI-only proxy that discovers cluster A's brokers from the rig's
// metadata store (their registrations' pulsarServiceUrlTls: pulsar+ssl://brokerN.rig.test:port)
// and checks their certificates against the rig's CA; extraYAML is appended (top-level keys).
func startSNIProxy(t *testing.T, extraYAML string) *proxyproc.Proc {
	t.Helper()
	return startSNIProxyFor(t, theRig, serviceName, extraYAML, broker1TLSPort, broker2TLSPort)
}

// startSNIProxyFor runs an SNI-only proxy in front of the brokers of rig r (on these TLS
// ports), with service as its sni.serviceNames unless extraYAML sets sni itself.
func startSNIProxyFor(t *testing.T, r *rig.Rig, service, extraYAML string, ports ...string) *proxyproc.Proc {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: {pulsar: "", pulsarSNI: "127.0.0.1:0", http: "127.0.0.1:0"}
discovery:
  healthCheckInterval: 1s
  metadataStore: {url: %q}
broker:
  allowedPorts: [%s]
  tls: {enabled: true, trustCertsFile: %q}
log: {level: debug, sessionSummary: info}
%s`, "zk:"+r.ZooKeeper, strings.Join(ports, ", "), ca.CertFile, extraYAML)
	if !strings.Contains(extraYAML, "sni:") {
		cfg += "sni: {serviceNames: [" + service + "]}\n"
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := proxyproc.StartConfig(proxyBinary, dir, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log tail:\n%s", p.LogTail(60))
		}
		p.Stop()
	})
	if p.SNIAddr == "" {
		t.Fatal("the proxy names no SNI listener")
	}
	// Discovery and the first probes take a moment (longer on a loaded machine): the tests
	// need every broker's name known (one broker on each of ports).
	wait.Until(t, 2*time.Minute, fmt.Sprintf("the %d brokers in the proxy's live set", len(ports)), func() bool {
		return metric(t, p, "pulsar_proxy_brokers", `state="live"`) == float64(len(ports))
	})
	return p
}

// metric reads one series from the proxy's /metrics (0 when absent).
func metric(t *testing.T, p *proxyproc.Proc, name, labels string) float64 {
	t.Helper()
	_, body := p.Get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"{"+labels+"}") || labels == "" && strings.HasPrefix(line, name+" ") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			return v
		}
	}
	return 0
}

// recorders listen on the decoy address, on the brokers' TLS ports and the usual TLS ones, and
// count what connects: a relay that dialled a name it should have refused, or a client that
// went around the proxy, would land here.
type recorders struct{ accepted atomic.Int64 }

func startRecorders(t *testing.T) *recorders {
	t.Helper()
	r := &recorders{}
	for _, port := range []string{broker1TLSPort, broker2TLSPort, "6651", "443"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(decoy, port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				r.accepted.Add(1)
				c.Close()
			}
		}()
	}
	return r
}

// javaRun is one run of testdata/SniClient.java.
type javaRun struct {
	Sent       int            `json:"sent"`
	Received   int            `json:"received"`
	Partitions map[string]int `json:"partitions"`
}

// runJavaClient runs SniClient through the proxy's SNI listener; its JVM resolves the brokers'
// names to the decoy address (jdk.net.hosts.file), so a connection that went around the proxy
// would fail, and be recorded. whileConnected runs while its consumer is still subscribed.
func runJavaClient(t *testing.T, p *proxyproc.Proc, topic string, count int, cert []string, whileConnected func(javaRun)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	prog, err := rig.CompileJava(ctx, filepath.Join("testdata", "SniClient.java"))
	rig.Need(t, "the Java client", err)
	hosts := filepath.Join(dir, "client-hosts")
	self, _ := os.Hostname() // the JVM looks its own name up
	os.WriteFile(hosts, []byte(decoy+" "+broker1Name+" "+broker2Name+" "+serviceName+"\n127.0.0.1 localhost "+self+"\n"), 0o644)
	args := append(append([]string{"-Xmx512m"}, rig.ClientJVMFlags...), "-Djdk.net.hosts.file="+hosts, "-cp", prog.Classes+":"+prog.CP, prog.Main,
		"pulsar+ssl://"+serviceName+":6651", "pulsar+ssl://"+p.SNIAddr, ca.CertFile, topic, fmt.Sprint(count))
	args = append(args, cert...)
	cmd := exec.CommandContext(ctx, "java", args...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := resultLine(bufio.NewReader(stdout))
	var run javaRun
	if err != nil || json.Unmarshal([]byte(line), &run) != nil {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("SniClient printed %q (%v); stderr tail:\n%s", line, err, tail(stderr.String(), 4000))
	}
	whileConnected(run)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SniClient: %v\n%s", err, tail(stderr.String(), 4000))
	}
}

// resultLine is the first line of the program's output that is a JSON object (its log may
// come before it).
func resultLine(r *bufio.Reader) (string, error) {
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "{") || err != nil {
			return line, err
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// consumerRoles are the roles (appId) the broker that owns partition holds for the
// subscription's consumers: the role it authenticated, as its topic stats show it.
func consumerRoles(t *testing.T, partition, sub string) []string {
	t.Helper()
	st, err := theRig.TopicStats(context.Background(), partition)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Subscriptions map[string]struct {
			Consumers []struct {
				AppID string `json:"appId"`
			} `json:"consumers"`
		} `json:"subscriptions"`
	}
	json.Unmarshal(st.Raw, &raw)
	var roles []string
	for _, c := range raw.Subscriptions[sub].Consumers {
		roles = append(roles, c.AppID)
	}
	return roles
}

// The Java client with proxyServiceUrl(proxy, SNI) produces to and consumes from a
// partitioned topic whose partitions live on both brokers, through the SNI listener alone:
// its lookups go to the service name, its producers and consumers to each broker's own name.
// Its JVM cannot reach a broker by itself (the names resolve to the decoy for it), and the
// decoy's listeners see nothing. Without a client certificate the brokers see the anonymous
// role; with one, the certificate's own role (CN alice) in their topic stats: the TLS and the
// authentication ended at the broker, not at the proxy.
func TestJavaClientThroughSNI(t *testing.T) {
	rec := startRecorders(t)
	p := startSNIProxy(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic, owners, err := theRig.CreateSpreadPartitionedTopic(ctx, "sni", 4)
	if err != nil {
		t.Fatal(err)
	}
	alice := ca.Client(t, "alice")
	for _, tc := range []struct {
		what string
		cert []string
		role string
	}{
		{"anonymous", nil, "anonymous"},
		{"client certificate", []string{alice.CertFile, alice.KeyFile}, "alice"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			runJavaClient(t, p, topic, 40, tc.cert, func(run javaRun) {
				if run.Received != run.Sent {
					t.Fatalf("received %d of %d messages", run.Received, run.Sent)
				}
				onBroker := map[int]int{}
				for i, owner := range owners {
					part := fmt.Sprintf("%s-partition-%d", topic, i)
					onBroker[owner.N] += run.Partitions[part]
					if roles := consumerRoles(t, part, "sni"); len(roles) != 1 || roles[0] != tc.role {
						t.Errorf("%s (on broker %d): the broker's consumers have roles %v, want [%s]", part, owner.N, roles, tc.role)
					}
				}
				if onBroker[1] == 0 || onBroker[2] == 0 {
					t.Fatalf("messages by broker %v (owners %v): want both brokers", onBroker, owners)
				}
			})
		})
	}
	if n := rec.accepted.Load(); n != 0 {
		t.Fatalf("%d connections reached the decoy: a client went around the proxy", n)
	}
	for match, least := range map[string]float64{"service": 1, "broker": 2} {
		if v := metric(t, p, "pulsar_proxy_sni_relayed_total", `match="`+match+`"`); v < least {
			t.Errorf("relayed{match=%s} = %v, want at least %v", match, v, least)
		}
	}
}

// A server name that is not a live broker never reaches a socket: the client is refused with
// a TLS alert, the decoy's listeners (where such names resolve, on the ports a relay might
// try) see nothing, and each refusal is counted by its reason.
func TestNonBrokerNamesReachNoSocket(t *testing.T) {
	rec := startRecorders(t)
	p := startSNIProxy(t, "")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tc := range []struct {
		name, reason string
	}{
		{notABroker, "not_a_broker"},
		{"localhost", "not_a_broker"},
		{"rig.test", "not_a_broker"},
		{broker1Name + ".evil.example", "not_a_broker"},
		{"x." + broker1Name, "not_a_broker"},
		{"127.0.0.1", "no_server_name"}, // an IP address is never sent as a server name
	} {
		before := metric(t, p, "pulsar_proxy_sni_refused_total", `reason="`+tc.reason+`"`)
		c, err := tls.Dial("tcp", p.SNIAddr, &tls.Config{ServerName: tc.name, RootCAs: roots, InsecureSkipVerify: tc.name == "127.0.0.1"})
		if err == nil {
			c.Close()
			t.Errorf("%s: relayed", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), "unrecognized name") {
			t.Errorf("%s: %v, want the unrecognized_name alert", tc.name, err)
		}
		// Counted as the connection ends, just after the alert the client has read.
		var v float64
		wait.Within(5*time.Second, func() bool {
			v = metric(t, p, "pulsar_proxy_sni_refused_total", `reason="`+tc.reason+`"`)
			return v > before
		})
		if v != before+1 {
			t.Errorf("%s: refused{reason=%s} went from %v to %v", tc.name, tc.reason, before, v)
		}
	}
	// A broker's name in other letters is the same DNS name: relayed, to that broker.
	c, err := tls.Dial("tcp", p.SNIAddr, &tls.Config{ServerName: strings.ToUpper(broker2Name), RootCAs: roots})
	if err != nil {
		t.Fatalf("%s: %v", strings.ToUpper(broker2Name), err)
	}
	if got := c.ConnectionState().PeerCertificates[0].DNSNames[0]; got != broker2Name {
		t.Errorf("relayed to the broker whose certificate names %s", got)
	}
	c.Close()
	if n := rec.accepted.Load(); n != 0 {
		t.Fatalf("%d connections reached the decoy", n)
	}
}

// Pulsar's brokers read a PROXY header only inside TLS (their decoder sits behind the TLS
// handler), so sni.proxyProtocol, which sends it ahead of the client's TLS, breaks every
// handshake with them: the documented reason to leave it off towards brokers' own TLS ports
// (docs/sni.md). This is that outcome, measured against a real broker.
func TestProxyHeaderAheadOfTLSBreaksPulsarBrokers(t *testing.T) {
	p := startSNIProxy(t, "sni: {serviceNames: ["+serviceName+"], proxyProtocol: v2}\n")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	c, err := tls.Dial("tcp", p.SNIAddr, &tls.Config{ServerName: broker1Name, RootCAs: roots})
	if err == nil {
		c.Close()
		t.Fatal("a broker completed a TLS handshake behind a PROXY header; docs/sni.md says it cannot")
	}
	t.Logf("as documented: %v", err)
}
