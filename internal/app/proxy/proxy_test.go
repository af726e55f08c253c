package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/fakebroker"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startBroker is a stand-in broker that answers the proxy's CONNECT, its health pings and
// lookups, each lookup with itself as the owner.
func startBroker(t *testing.T) *fakebroker.Broker {
	var b *fakebroker.Broker
	b = fakebroker.Start(t, func(c net.Conn, cmd *pb.BaseCommand) {
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			frame.WriteCommand(c, frame.Connected("fake-broker", 21, 5<<20))
		case pb.BaseCommand_PING:
			frame.WriteCommand(c, frame.Pong())
		case pb.BaseCommand_LOOKUP:
			frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(),
				LookupTopicResponse: &pb.CommandLookupTopicResponse{
					RequestId: cmd.GetLookupTopic().RequestId, BrokerServiceUrl: proto.String("pulsar://" + b.Addr),
					Response: pb.CommandLookupTopicResponse_Connect.Enum(), Authoritative: proto.Bool(true)}})
		}
	})
	return b
}

// loadConfig is the configuration of env with listeners on 127.0.0.1:0, a short drain, and
// static discovery of broker (whose port is allowed).
func loadConfig(t *testing.T, broker string, env ...string) *config.Config {
	t.Helper()
	_, port, _ := net.SplitHostPort(broker)
	cfg, err := config.Load("", append([]string{
		"PULSAR_PROXY_LISTEN_PULSAR=127.0.0.1:0", "PULSAR_PROXY_LISTEN_HTTP=127.0.0.1:0",
		"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar://" + broker, "PULSAR_PROXY_BROKER_ALLOWED_PORTS=" + port,
		"PULSAR_PROXY_SESSION_DRAIN_TIMEOUT=2s",
	}, env...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// run builds the proxy of cfg, logging to w, with reload as Options.Reload, runs it until the
// test ends, then checks that Run returned nil and closes it.
func run(t *testing.T, cfg *config.Config, w io.Writer, reload <-chan os.Signal) (*Proxy, Addrs) {
	t.Helper()
	p, err := Build(cfg, Options{Version: "test", LogOutput: w, Reload: reload})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		p.Close()
	})
	select {
	case <-p.Started():
	case err := <-ran:
		ran <- err
		t.Fatalf("Run returned before serving: %v", err)
	}
	return p, p.Addrs()
}

// logBuffer takes the proxy's log lines from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// pulsarClient connects to the proxy at addr and completes a CONNECT in lookup mode.
func pulsarClient(t *testing.T, addr string) (net.Conn, *frame.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	connect := &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("test"), ProtocolVersion: proto.Int32(21)}}
	if err := frame.WriteCommand(c, connect); err != nil {
		t.Fatal(err)
	}
	if cmd, err := r.ReadCommand(); err != nil || cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: got %v, %v; want CONNECTED", cmd, err)
	}
	return c, r
}

// TestRunServesAndDrains: a proxy built from a minimal configuration logs its startup line
// with the addresses it bound, answers a client's CONNECT and LOOKUP (through the broker of
// static discovery), serves /healthz, /readyz and /metrics, and once ctx ends drains (a
// client still connected is let go) and returns.
func TestRunServesAndDrains(t *testing.T) {
	broker := startBroker(t)
	var log logBuffer
	p, err := Build(loadConfig(t, broker.Addr), Options{Version: "1.2.3-test", LogOutput: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	<-p.Started()
	a := p.Addrs()
	if !strings.Contains(log.String(), `"pulsar":"`+a.Pulsar+`","http":"`+a.HTTP+`"`) ||
		!strings.Contains(log.String(), `"version":"1.2.3-test"`) || !strings.Contains(log.String(), `"message":"pulsar-proxy started"`) {
		t.Errorf("the startup line does not name %+v and the version:\n%s", a, log.String())
	}

	c, r := pulsarClient(t, a.Pulsar)
	checkLookup(t, c, r, broker.Addr)
	checkHTTP(t, "http://"+a.HTTP, "1.2.3-test")

	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of ctx's end (session.drainTimeout 2s)")
	}
	if _, err := r.ReadCommand(); err == nil {
		t.Error("the client's connection is still open after the drain")
	}
	for _, want := range []string{"stopping: draining sessions", "pulsar-proxy stopped"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, log.String())
		}
	}
}

// checkLookup looks a topic up on the lookup-mode connection c: the broker's answer comes
// back under the client's request id, telling the client to come through the proxy.
func checkLookup(t *testing.T, c net.Conn, r *frame.Reader, broker string) {
	t.Helper()
	lookup := &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://public/default/t"), RequestId: proto.Uint64(7)}}
	if err := frame.WriteCommand(c, lookup); err != nil {
		t.Fatal(err)
	}
	resp, err := r.ReadCommand()
	if lr := resp.GetLookupTopicResponse(); err != nil || lr.GetRequestId() != 7 || lr.GetResponse() != pb.CommandLookupTopicResponse_Connect ||
		lr.GetBrokerServiceUrl() != "pulsar://"+broker || !lr.GetProxyThroughServiceUrl() {
		t.Fatalf("LOOKUP: got %v, %v; want Connect to %s through the proxy", resp, err, broker)
	}
}

// checkHTTP checks the HTTP plane at url: alive, ready once the broker answered its health
// check, and the metrics with the build's version.
func checkHTTP(t *testing.T, url, version string) {
	t.Helper()
	if code, _ := get(t, url+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	wait.Until(t, 10*time.Second, "the proxy to be ready", func() bool { code, _ := get(t, url+"/readyz"); return code == http.StatusOK })
	_, metrics := get(t, url+"/metrics")
	for _, want := range []string{`pulsar_proxy_build_info{goversion=`, `version="` + version + `"`, "pulsar_proxy_ready 1", `pulsar_proxy_brokers{state="healthy"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// TestBuildErrorsNameTheKey: what the configuration names but Build cannot use (a file that
// is not there, a value validation lets through) is refused with the key.
func TestBuildErrorsNameTheKey(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		key    string
		change func(*config.Config)
	}{
		{"log.level", func(c *config.Config) { c.Log.Level = "loud" }},
		{"log.sessionSummary", func(c *config.Config) { c.Log.SessionSummary = "loud" }},
		{"discovery.static.brokers", func(c *config.Config) { c.Discovery.Static.Brokers = []string{"http://broker:8080"} }},
		{"discovery.metadataStore", func(c *config.Config) {
			c.Discovery.MetadataStore.URL, c.Discovery.MetadataStore.DigestFile = "zk:127.0.0.1:2181", missing
		}},
		{"auth.token.secretKeyFile", func(c *config.Config) { c.Auth.Enabled, c.Auth.Token.SecretKeyFile = true, missing }},
		{"authz.policyFile", func(c *config.Config) { c.Authz.Enabled, c.Authz.PolicyFile = true, missing }},
		{"auth.brokerClient.tokenFile", func(c *config.Config) { c.Auth.BrokerClient.TokenFile = missing }},
		{"admin.accessLog", func(c *config.Config) { c.Admin.Enabled, c.Admin.AccessLog = true, "loud" }},
		{"admin.functionWorkers", func(c *config.Config) { c.Admin.Enabled, c.Admin.FunctionWorkers = true, []string{"ftp://w"} }},
	} {
		t.Run(c.key, func(t *testing.T) {
			cfg := loadConfig(t, "127.0.0.1:6650")
			c.change(cfg)
			p, err := Build(cfg, Options{LogOutput: io.Discard})
			if err == nil {
				p.Close()
				t.Fatalf("Build took it")
			}
			if !strings.HasPrefix(err.Error(), c.key) {
				t.Errorf("Build: %v; want it to start with %s", err, c.key)
			}
		})
	}
}

// TestBuildThenClose: a proxy built and never run is released by Close (with multiplexing
// on, Build starts the shared pool's reaper; goleak checks it stopped), and says how it will
// forward.
func TestBuildThenClose(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"PULSAR_PROXY_BROKER_MULTIPLEX=true"}, "multiplexed"}, // alone: passthrough is implied off
		{[]string{"PULSAR_PROXY_BROKER_MULTIPLEX=true", "PULSAR_PROXY_SESSION_PASSTHROUGH=true"}, "multiplexed"},
		{[]string{"PULSAR_PROXY_SESSION_PASSTHROUGH=false"}, "framed"},
		{nil, "passthrough"},
	} {
		p, err := Build(loadConfig(t, "127.0.0.1:6650", c.env...), Options{LogOutput: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.forwarding(); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: forwarding %q, want %s", c.env, got, c.want)
		}
		p.Close()
	}
}

// TestRunListenErrorsNameTheKey: a listener that cannot be opened stops Run before it serves,
// with the key, and the others it opened are closed (the port can be taken again).
func TestRunListenErrorsNameTheKey(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, key := range []string{"listen.pulsar", "listen.http", "listen.pprof"} {
		t.Run(key, func(t *testing.T) {
			env := "PULSAR_PROXY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")) + "=" + taken.Addr().String()
			p, err := Build(loadConfig(t, "127.0.0.1:6650", env), Options{LogOutput: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			err = p.Run(context.Background())
			if err == nil || !strings.HasPrefix(err.Error(), key+":") || !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("Run: %v; want %s: address in use", err, key)
			}
			select {
			case <-p.Started():
				t.Error("Started is closed")
			default:
			}
		})
	}
}

// TestReloadOnSignal: with the authorization policy on, a value on Options.Reload reloads it
// at once (the process sends SIGHUPs there); without it, nothing is reloaded and the process
// leaves SIGHUP alone.
func TestReloadOnSignal(t *testing.T) {
	broker := startBroker(t)
	if p, err := Build(loadConfig(t, broker.Addr), Options{LogOutput: io.Discard}); err != nil || p.ReloadsOnSignal() {
		t.Fatalf("without authz: ReloadsOnSignal true (%v)", err)
	} else {
		p.Close()
	}

	dir := t.TempDir()
	key := filepath.Join(dir, "secret.key")
	policy := filepath.Join(dir, "policy.yaml")
	writeFile(t, key, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 32)))
	writeFile(t, policy, "superUserRoles: [admin]\n")
	cfg := loadConfig(t, broker.Addr, "PULSAR_PROXY_AUTH_ENABLED=true", "PULSAR_PROXY_AUTH_TOKEN_SECRET_KEY_FILE="+key,
		"PULSAR_PROXY_AUTHZ_ENABLED=true", "PULSAR_PROXY_AUTHZ_POLICY_FILE="+policy, "PULSAR_PROXY_AUTHZ_RELOAD_INTERVAL=1h")
	hup := make(chan os.Signal, 1)
	var log logBuffer
	p, _ := run(t, cfg, &log, hup)
	if !p.ReloadsOnSignal() {
		t.Fatal("with authz: ReloadsOnSignal false")
	}
	writeFile(t, policy, "superUserRoles: [admin, operator]\n")
	hup <- syscall.SIGHUP
	wait.Until(t, 10*time.Second, "the policy reload to be logged", func() bool { return strings.Contains(log.String(), "authorization policy reloaded") })
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
