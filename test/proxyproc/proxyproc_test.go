package proxyproc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

func TestStartedLine(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "proxy.log")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(log, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"level":"info","message":"loading"}` + "\n" + `{"level":"info","pulsar":"127.0.0.1:4`)
	if _, ok, err := startedLine(log); ok || err != nil {
		t.Fatalf("a partly written line: ok %v, err %v; want not yet", ok, err)
	}
	write(`{"level":"info","pulsar":"127.0.0.1:40001","pulsar_tls":"127.0.0.1:40002","http":"127.0.0.1:40003","message":"pulsar-proxy started"}` + "\n")
	a, ok, err := startedLine(log)
	if !ok || err != nil || a.Pulsar != "127.0.0.1:40001" || a.PulsarTLS != "127.0.0.1:40002" || a.HTTP != "127.0.0.1:40003" {
		t.Fatalf("startedLine = %+v, %v, %v", a, ok, err)
	}
	write(`{"level":"info","message":"pulsar-proxy started"}` + "\n")
	if _, _, err := startedLine(log); err == nil {
		t.Fatal("a startup line without addresses accepted")
	}
}

// The real binary binds port 0 and Start learns the ports it got from its startup line; two
// proxies started at once get distinct ports. No broker is needed: the proxy serves /healthz
// (liveness) whatever the brokers do.
func TestStartLearnsBoundPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the proxy")
	}
	dir := t.TempDir()
	bin, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca := certs.NewCA(t, dir, "ca")
	server := ca.Server(t, "proxy", time.Now().Add(time.Hour))
	tlsYAML := fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n", server.CertFile, server.KeyFile)

	seen := map[string]bool{}
	for i, extra := range []string{"", tlsYAML} {
		p, err := Start(bin, t.TempDir(), []string{"pulsar://127.0.0.1:16650"}, extra)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Stop()
			if errs := p.LogErrors(); len(errs) > 0 {
				t.Errorf("the proxy's log: %v", errs)
			}
		})
		addrs := []string{p.Addr, strings.TrimPrefix(p.HTTPURL, "http://")}
		if i == 1 {
			if p.TLSAddr == "" || p.PulsarTLSURL != "pulsar+ssl://"+p.TLSAddr {
				t.Fatalf("TLS listener: %q %q", p.TLSAddr, p.PulsarTLSURL)
			}
			addrs = append(addrs, p.TLSAddr)
		} else if p.TLSAddr != "" {
			t.Fatalf("a TLS address without a TLS section: %s", p.TLSAddr)
		}
		if p.PulsarURL != "pulsar://"+p.Addr {
			t.Fatalf("PulsarURL %q, Addr %q", p.PulsarURL, p.Addr)
		}
		for _, a := range addrs {
			host, port, err := net.SplitHostPort(a)
			if err != nil || host != "127.0.0.1" || port == "0" || seen[a] {
				t.Fatalf("address %q (err %v): want 127.0.0.1 and a port of its own", a, err)
			}
			seen[a] = true
			c, err := net.DialTimeout("tcp", a, 5*time.Second)
			if err != nil {
				t.Fatalf("nothing listens on %s: %v", a, err)
			}
			c.Close()
		}
		if code, body := p.Get("/healthz"); code != 200 {
			t.Fatalf("/healthz: %d %s", code, body)
		}
	}
}

// A log that never names the addresses (a level above info) fails Start with the reason.
func TestStartNeedsTheStartupLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the proxy")
	}
	dir := t.TempDir()
	bin, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = Start(bin, t.TempDir(), []string{"pulsar://127.0.0.1:16650"}, "log:\n  level: warn\n")
	if err == nil || !strings.Contains(err.Error(), `logged no "pulsar-proxy started" line`) {
		t.Fatalf("Start with log level warn: %v; want the missing startup line named", err)
	}
	t.Logf("refused after %s: %v", time.Since(began).Round(time.Second), strings.SplitN(err.Error(), "\n", 2)[0])
}
