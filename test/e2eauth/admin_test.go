package e2eauth

// The admin API through the proxy in front of brokers that authenticate (tokens), authorize
// (authorizationEnabled) and treat the proxy's role as a proxy (proxyRoles=proxy). A broker
// reads the client's role from X-Original-Principal when the request comes with a proxy role
// (PulsarWebResource.originalPrincipal in pulsar-broker 4.0) and then requires both the proxy's
// role and that one to be allowed.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// adminTenant's admins are alice and the proxy's role: a namespace operation through the
// proxy needs both (the broker checks the proxy's role and the original principal).
const adminTenant = "httpacme"

// startAdminProxy runs the proxy with authentication, its own token (role proxy) for brokers
// and the brokers' web URLs; forward sends the client's own token on instead of the proxy's.
func startAdminProxy(t *testing.T, forward bool, extra string) *proxyproc.Proc {
	t.Helper()
	dir := t.TempDir()
	yaml := "auth:\n  enabled: true\n  token:\n    secretKeyFile: " + secretFile + "\n" +
		"  forwardClientCredentials: " + fmt.Sprint(forward) + "\n  brokerClient:\n    tokenFile: " + proxyTokenFile(t, dir) + "\n" + extra
	proc, err := proxyproc.StartWeb(proxyBinary, dir, []string{theRig.BrokerURL(1), theRig.BrokerURL(2)},
		[]string{theRig.BrokerHTTP(1), theRig.BrokerHTTP(2)}, yaml)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !proc.Stop() {
			t.Errorf("pulsar-proxy did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("proxy log tail:\n%s", proc.LogTail(60))
		}
	})
	return proc
}

// adminCall sends a request with the token of role ("" = none) and extra headers, and returns
// the status and body.
func adminCall(t *testing.T, method, url, role, body string, header ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, time.Minute), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if role != "" {
		req.Header.Set("Authorization", "Bearer "+mustToken(role, 0))
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// accessEntry is one line of the proxy's admin access log.
type accessEntry struct {
	Message   string `json:"message"`
	Method    string `json:"method"`
	Path      string `json:"path"`
	Status    int    `json:"status"`
	Broker    string `json:"broker"`
	Principal string `json:"principal"`
	Error     string `json:"error"`
}

// lastAccess is the proxy's access-log line of the last request to path (waiting up to five
// seconds for it: the line is written as the handler ends).
func lastAccess(t *testing.T, p *proxyproc.Proc, method, path string) accessEntry {
	t.Helper()
	var found *accessEntry
	if !wait.Within(5*time.Second, func() bool {
		f, err := os.Open(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e accessEntry
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Message == "admin request" && e.Method == method && e.Path == path {
				found = &e
			}
		}
		return found != nil
	}) {
		t.Fatalf("no access-log line for %s %s", method, path)
	}
	return *found
}

func setupAdminTenant(t *testing.T) {
	t.Helper()
	err := theRig.CreateTenant(ctxT(t, time.Minute), adminTenant, "alice", proxyRole)
	if err != nil && !rig.IsStatus(err, 409) {
		t.Fatal(err)
	}
}

// nsNames lists the namespaces of the tenant, asked of a broker directly as the super-user.
func nsNames(t *testing.T) []string {
	t.Helper()
	code, body := adminCall(t, "GET", theRig.BrokerHTTP(1)+"/admin/v2/namespaces/"+adminTenant, superUser, "")
	var out []string
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("list namespaces: %d %s", code, body)
	}
	return out
}

// TestAdminAuthBrokerDecidesByClientRole: the proxy authenticates the client, calls the broker
// with its own token and names the client in X-Original-Principal; the broker decides by the
// client's role: alice administers her tenant, bob (whose proxy-held request carries the same
// proxy token) is refused by the broker, a forged X-Original-Principal does not help him, and
// a request without credentials never reaches a broker.
func TestAdminAuthBrokerDecidesByClientRole(t *testing.T) {
	setupAdminTenant(t)
	p := startAdminProxy(t, false, "")
	ns := adminTenant + "/" + rig.UniqueName("alice")
	nsPath := "/admin/v2/namespaces/" + ns

	// No credentials, a token of another key: 401 from the proxy, with the reason.
	code, body := adminCall(t, "PUT", p.HTTPURL+nsPath, "", "{}")
	if code != http.StatusUnauthorized || !strings.Contains(body, "no_credentials") {
		t.Errorf("no token: %d %s", code, body)
	}
	if e := lastAccess(t, p, "PUT", nsPath); e.Broker != "" {
		t.Errorf("a request without credentials reached broker %s", e.Broker)
	}
	forged, _ := signWith([]byte("another key, 32 bytes long......"), "alice", 0)
	code, body = adminCall(t, "PUT", p.HTTPURL+nsPath, "", "{}", "Authorization", "Bearer "+forged)
	if code != http.StatusUnauthorized || !strings.Contains(body, "bad_signature") {
		t.Errorf("token of another key: %d %s", code, body)
	}

	// Alice, an admin of the tenant: creates a namespace, grants on it, reads it back.
	if code, body := adminCall(t, "PUT", p.HTTPURL+nsPath, "alice", "{}"); code != http.StatusNoContent {
		t.Fatalf("alice creates %s: %d %s", ns, code, body)
	}
	if e := lastAccess(t, p, "PUT", nsPath); e.Principal != "alice" || e.Broker == "" {
		t.Errorf("access log: %+v", e)
	}
	if code, body := adminCall(t, "POST", p.HTTPURL+nsPath+"/permissions/carol", "alice", `["consume"]`); code != http.StatusNoContent {
		t.Errorf("alice grants carol: %d %s", code, body)
	}
	// The grant was written through one broker; the other may answer from its policy cache
	// until the metadata store's notification reaches it.
	if !wait.Within(10*time.Second, func() bool {
		code, body = adminCall(t, "GET", p.HTTPURL+nsPath+"/permissions", "alice", "")
		var perms map[string][]string
		return code == 200 && json.Unmarshal([]byte(body), &perms) == nil && slices.Equal(perms["carol"], []string{"consume"})
	}) {
		t.Errorf("alice reads the permissions for 10 s: %d %s", code, body)
	}
	// pulsar-admin with alice's token through the proxy.
	a := rig.Admin{URL: p.HTTPURL, Token: mustToken("alice", 0), Dir: t.TempDir()}
	res := a.Run(context.Background(), "namespaces", "list", adminTenant)
	if res.Err != nil || !slices.Contains(strings.Fields(res.Stdout), ns) {
		t.Errorf("pulsar-admin as alice: %s", res)
	}

	// Bob is no admin of the tenant: the broker refuses him although the proxy's role, whose
	// token the request carries, is one. Naming alice himself changes nothing: the proxy
	// removes his X-Original-Principal and names the role he authenticated as.
	bobNS := adminTenant + "/" + rig.UniqueName("bob")
	for _, h := range [][]string{nil, {"X-Original-Principal", "alice"}, {"X-Original-Principal", superUser}} {
		code, body := adminCall(t, "PUT", p.HTTPURL+"/admin/v2/namespaces/"+bobNS, "bob", "{}", h...)
		// The broker's answer names what it decided on: the proxy's role and bob.
		if (code != http.StatusUnauthorized && code != http.StatusForbidden) ||
			!strings.Contains(body, "originalPrincipal [bob]") || !strings.Contains(body, "clientAppId ["+proxyRole+"]") {
			t.Errorf("bob (headers %v) creates %s: %d %s", h, bobNS, code, body)
		}
		e := lastAccess(t, p, "PUT", "/admin/v2/namespaces/"+bobNS)
		if e.Broker == "" || e.Principal != "bob" {
			t.Errorf("bob's request was not decided by a broker: %+v", e)
		}
		t.Logf("bob (headers %v): %d %s", h, code, strings.TrimSpace(body))
	}
	if names := nsNames(t); !slices.Contains(names, ns) || slices.Contains(names, bobNS) {
		t.Errorf("namespaces of %s: %v (want %s, not %s)", adminTenant, names, ns, bobNS)
	}
	if code, body := adminCall(t, "DELETE", p.HTTPURL+nsPath, "alice", ""); code != http.StatusNoContent {
		t.Errorf("alice deletes %s: %d %s", ns, code, body)
	}

	// A super-user operation: the broker wants the proxy's role to be a super-user too (it is
	// not in this rig), whoever the client is.
	code, body = adminCall(t, "GET", p.HTTPURL+"/admin/v2/brokers/"+theRig.Cluster, superUser, "")
	if (code != http.StatusUnauthorized && code != http.StatusForbidden) || !strings.Contains(body, "originalPrincipal ["+superUser+"]") ||
		!strings.Contains(body, "clientAppId ["+proxyRole+"]") {
		t.Errorf("super-user operation through a non-super-user proxy role: %d %s", code, body)
	}
}

// TestAdminAuthForwardedCredentials: with auth.forwardClientCredentials the broker
// authenticates the client's own token: alice administers her tenant, bob is refused, and the
// super-user's own token allows a super-user operation.
func TestAdminAuthForwardedCredentials(t *testing.T) {
	setupAdminTenant(t)
	p := startAdminProxy(t, true, "")
	ns := adminTenant + "/" + rig.UniqueName("fwd")
	if code, body := adminCall(t, "PUT", p.HTTPURL+"/admin/v2/namespaces/"+ns, "alice", "{}"); code != http.StatusNoContent {
		t.Fatalf("alice: %d %s", code, body)
	}
	if code, body := adminCall(t, "PUT", p.HTTPURL+"/admin/v2/namespaces/"+ns+"-bob", "bob", "{}"); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("bob: %d %s", code, body)
	}
	code, body := adminCall(t, "GET", p.HTTPURL+"/admin/v2/brokers/"+theRig.Cluster, superUser, "")
	if code != 200 || !strings.Contains(body, theRig.BrokerID(1)) {
		t.Errorf("super-user with forwarded credentials: %d %s", code, body)
	}
	adminCall(t, "DELETE", p.HTTPURL+"/admin/v2/namespaces/"+ns, "alice", "")
}

// TestAdminRedirectOutsideLiveSetRefused: a broker redirects a request for another cluster to
// that cluster's service URL (PulsarWebResource.validateClusterOwnership). Here that URL is a
// decoy listener on this machine, which no discovery lists: the proxy answers 502, logs the
// refusal, and never connects to the decoy.
func TestAdminRedirectOutsideLiveSetRefused(t *testing.T) {
	decoy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer decoy.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := decoy.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	cluster := rig.UniqueName("decoy")
	clusterURL := theRig.BrokerHTTP(1) + "/admin/v2/clusters/" + cluster
	if code, body := adminCall(t, "PUT", clusterURL, superUser, `{"serviceUrl":"http://`+decoy.Addr().String()+`"}`); code/100 != 2 {
		t.Fatalf("create cluster %s: %d %s", cluster, code, body)
	}
	t.Cleanup(func() { adminCall(t, "DELETE", clusterURL, superUser, "") })

	// The broker's redirect, asked directly (not followed): its Location is the decoy.
	req, _ := http.NewRequest("GET", theRig.BrokerHTTP(1)+"/admin/v2/brokers/"+cluster, nil)
	req.Header.Set("Authorization", "Bearer "+mustToken(superUser, 0))
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.Contains(resp.Header.Get("Location"), decoy.Addr().String()) {
		t.Fatalf("the broker answers %d, Location %q; want 307 to the decoy", resp.StatusCode, resp.Header.Get("Location"))
	}

	p := startAdminProxy(t, true, "")
	path := "/admin/v2/brokers/" + cluster
	for range 2 { // once starting at each broker
		code, body := adminCall(t, "GET", p.HTTPURL+path, superUser, "")
		if code != http.StatusBadGateway || !strings.Contains(body, "not a broker web service this proxy knows") {
			t.Errorf("redirect to the decoy: %d %s", code, body)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the decoy got %d connections", n)
	}
	log, _ := os.ReadFile(filepath.Clean(p.LogPath))
	if !strings.Contains(string(log), "refused a redirect to a web service the live set does not list") ||
		!strings.Contains(string(log), decoy.Addr().String()) {
		t.Errorf("the refusal is not logged with the Location")
	}
}
