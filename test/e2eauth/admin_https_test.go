package e2eauth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// TestAdminHTTPSClientCertificates: admin.listenHTTPS serves the admin API over TLS with the
// certificate of tls.certFile, reloaded when the file changes; a verified client certificate
// names the client's role (auth method tls), which the broker then decides by, as for a token.
func TestAdminHTTPSClientCertificates(t *testing.T) {
	setupAdminTenant(t)
	ca := certs.NewCA(t, t.TempDir(), "clients")
	server := ca.Server(t, "proxy", time.Now().Add(24*time.Hour))
	p := startAdminProxy(t, false, fmt.Sprintf("admin:\n  listenHTTPS: \"127.0.0.1:0\"\n"+
		"tls:\n  certFile: %q\n  keyFile: %q\n  clientCAFile: %q\n  clientAuth: request\n", server.CertFile, server.KeyFile, ca.CertFile))
	if p.HTTPSURL == "" {
		t.Fatal("the proxy started no HTTPS listener")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := func(cert *certs.Pair) *http.Client {
		tc := &tls.Config{RootCAs: roots}
		if cert != nil {
			kp, err := tls.LoadX509KeyPair(cert.CertFile, cert.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{kp}
		}
		return &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	}
	do := func(c *http.Client, method, path, body string) (int, string, *tls.ConnectionState) {
		t.Helper()
		req, _ := http.NewRequest(method, p.HTTPSURL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.TLS
	}

	alice, bob := ca.Client(t, "alice"), ca.Client(t, "bob")
	ns := adminTenant + "/" + rig.UniqueName("cert")
	if code, body, _ := do(client(&alice), "PUT", "/admin/v2/namespaces/"+ns, "{}"); code != http.StatusNoContent {
		t.Fatalf("alice's certificate creates %s: %d %s", ns, code, body)
	}
	if e := lastAccess(t, p, "PUT", "/admin/v2/namespaces/"+ns); e.Principal != "alice" {
		t.Errorf("access log: %+v", e)
	}
	code, body, _ := do(client(&bob), "PUT", "/admin/v2/namespaces/"+ns+"-bob", "{}")
	if (code != http.StatusUnauthorized && code != http.StatusForbidden) || !strings.Contains(body, "originalPrincipal [bob]") {
		t.Errorf("bob's certificate: %d %s", code, body)
	}
	if code, body, _ := do(client(nil), "GET", "/admin/v2/namespaces/"+adminTenant, ""); code != http.StatusUnauthorized || !strings.Contains(body, "no_credentials") {
		t.Errorf("no certificate, no token: %d %s", code, body)
	}
	if code, body, _ := do(client(&alice), "DELETE", "/admin/v2/namespaces/"+ns, ""); code != http.StatusNoContent {
		t.Errorf("alice deletes %s: %d %s", ns, code, body)
	}

	// A renewed certificate on disk is served to new handshakes without a restart.
	_, _, st := do(client(nil), "GET", "/healthz", "")
	first := st.PeerCertificates[0].SerialNumber
	time.Sleep(1100 * time.Millisecond) // the files are looked at no more than once a second
	renewed := ca.Server(t, "proxy", time.Now().Add(48*time.Hour))
	var now *big.Int
	wait.Within(10*time.Second, func() bool {
		_, _, st := do(client(nil), "GET", "/healthz", "")
		now = st.PeerCertificates[0].SerialNumber
		return now.Cmp(renewed.Cert.SerialNumber) == 0
	})
	if now.Cmp(renewed.Cert.SerialNumber) != 0 {
		t.Errorf("still serving serial %v (first %v), want the renewed %v", now, first, renewed.Cert.SerialNumber)
	}
}
