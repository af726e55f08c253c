// Package e2eauth holds the end-to-end tests of authentication and authorization: its own
// rig whose brokers require tokens (AuthenticationProviderToken), authorize topic operations
// (authorizationEnabled), accept the proxy's role as a proxy (proxyRoles=proxy) and
// authenticate the client credentials the proxy forwards (authenticateOriginalAuthData, checked
// for expiry every 5 s), on a port block of its own so it never collides with the plain rig of
// test/e2e. The tests of client certificate roles need brokers that trust the proxy's
// original_principal instead (see trusting.go); they start a second rig for that, on demand.
package e2eauth

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// envAttach names the state file of an auth rig already up (development: saves restarts).
const envAttach = "PULSAR_PROXY_AUTH_RIG"

// rigPorts is this package's port block (test/e2e uses the defaults). Every rig port stays
// below the kernel's ephemeral range (32768 and up), where a client socket could take it first.
var rigPorts = []string{
	"RIG_BROKER1_PORT=26650", "RIG_BROKER1_HTTP_PORT=28080",
	"RIG_BROKER2_PORT=26651", "RIG_BROKER2_HTTP_PORT=28081",
	"RIG_ZK_PORT=22181", "RIG_BOOKIE_PORT=23181",
	"RIG_CONSUL_HTTP_PORT=28500", "RIG_CONSUL_DNS_PORT=28600",
	"RIG_CONSUL_SERF_LAN_PORT=28301", "RIG_CONSUL_SERF_WAN_PORT=28302",
	"RIG_CONSUL_SERVER_PORT=28300", "RIG_CONSUL_GRPC_PORT=28502", "RIG_CONSUL_GRPC_TLS_PORT=28503",
}

const (
	superUser = "admin" // the tests' and the brokers' internal clients' role
	proxyRole = "proxy" // the proxy's own role, in the brokers' proxyRoles
)

var (
	theRig      *rig.Rig
	secret      []byte // HS256 key shared by brokers and proxy
	secretFile  string // the key's bytes: the brokers' tokenSecretKey=file://… and the proxy's secretKeyFile
	proxyBinary string
)

func TestMain(m *testing.M) { os.Exit(proxyproc.LogsMain(runMain(m))) }

func runMain(m *testing.M) int {
	flag.Parse()
	if run, code := rig.Gate("e2eauth"); !run {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	r, err := startRig(ctx)
	if err != nil {
		return rig.StartFailure("e2eauth", err)
	}
	theRig = r
	if r.Owned() {
		defer func() {
			if err := r.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "rig: stopping the auth rig failed: %v\n", err)
			}
		}()
	}
	defer stopTrustingRig()
	bin, remove, err := proxyproc.BuildTemp("pulsar-proxy-e2eauth-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer remove()
	proxyBinary = bin
	if err := setupTenants(ctx, theRig); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: setup:", err)
		return 1
	}
	return m.Run()
}

// rigDir is where the auth rig keeps its state; its auth/ folder (key and broker config)
// survives `rig.sh down`, so a later run can attach.
func rigDir() string {
	return rig.PrivateDir("RIG_AUTH_DIR", "rig-auth")
}

func startRig(ctx context.Context) (*rig.Rig, error) {
	dir := rigDir()
	authDir := filepath.Join(dir, "auth")
	// One file of raw bytes, read as it is by the brokers (tokenSecretKey=file://…) and by the
	// proxy (auth.token.secretKeyFile), as an operator would share one key.
	secretFile = filepath.Join(authDir, "secret.key")
	if p := os.Getenv(envAttach); p != "" {
		var err error
		if secret, err = os.ReadFile(secretFile); err != nil {
			return nil, fmt.Errorf("attaching to %s: %w", p, err)
		}
		return rig.AttachWith(ctx, p, rig.Options{AdminToken: mustToken(superUser, 0)})
	}
	if err := os.MkdirAll(authDir, 0o700); err != nil {
		return nil, err
	}
	secret = make([]byte, 32)
	rand.Read(secret)
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		return nil, err
	}
	// Transaction coordinators on both brokers, for transactions_test.go.
	return startAuthRig(ctx, "auth rig", dir, append(append([]string(nil), rigPorts...), "RIG_TRANSACTIONS=1"), true)
}

// startAuthRig starts a rig in dir whose brokers require the tokens of the key in secretFile
// (already written), which they read from that file as the proxy does.
// verifyOriginal sets the brokers' authenticateOriginalAuthData: they then authenticate the
// client credentials the proxy forwards, instead of trusting the original_principal it names.
func startAuthRig(ctx context.Context, name, dir string, ports []string, verifyOriginal bool) (*rig.Rig, error) {
	authDir := filepath.Join(dir, "auth")
	if err := os.MkdirAll(authDir, 0o700); err != nil {
		return nil, err
	}
	admin := mustToken(superUser, 0)
	keyPath, err := filepath.Abs(secretFile)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(authDir, "broker-auth.conf")
	err = os.WriteFile(conf, []byte(`authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
tokenSecretKey=file://`+keyPath+`
authorizationEnabled=true
superUserRoles=`+superUser+`
proxyRoles=`+proxyRole+`
authenticateOriginalAuthData=`+fmt.Sprint(verifyOriginal)+`
authenticationRefreshCheckSeconds=5
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=token:`+admin+`
webSocketServiceEnabled=true
`), 0o600)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	r, err := rig.StartWith(ctx, rig.Options{
		Dir:        dir,
		Env:        append(append([]string(nil), ports...), "RIG_BROKER_EXTRA_CONF="+conf),
		AdminToken: admin,
	})
	if err == nil {
		fmt.Printf("%s: startup took %s\n", name, time.Since(began).Round(100*time.Millisecond))
	}
	return r, err
}

// token mints an HS256 token for role with the rig's key; ttl 0 = no expiry.
func token(role string, ttl time.Duration) (string, error) {
	return signWith(secret, role, ttl)
}

func signWith(key []byte, role string, ttl time.Duration) (string, error) {
	claims := jwt.MapClaims{"sub": role}
	if ttl != 0 {
		claims["exp"] = time.Now().Add(ttl).Unix()
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
}

func mustToken(role string, ttl time.Duration) string {
	s, err := token(role, ttl)
	if err != nil {
		panic(err)
	}
	return s
}

// Namespaces and what the brokers grant on them.
const (
	tenant      = "acme"
	nsShared    = "acme/shared"    // alice, bob, carol, dave: produce+consume
	nsAliceOnly = "acme/aliceonly" // alice only
	nsListing   = "acme/listing"   // carol may list and consume
)

func setupTenants(ctx context.Context, r *rig.Rig) error {
	if err := r.CreateTenant(ctx, tenant); err != nil && !rig.IsStatus(err, 409) {
		return err
	}
	grants := map[string][]string{
		nsShared:    {"alice", "bob", "carol", "dave", proxyRole},
		nsAliceOnly: {"alice", proxyRole},
		nsListing:   {"carol", proxyRole},
	}
	for ns, roles := range grants {
		if err := r.CreateNamespace(ctx, ns, 2); err != nil && !rig.IsStatus(err, 409) {
			return err
		}
		for _, role := range roles {
			if err := r.GrantNamespacePermission(ctx, ns, role, "produce", "consume"); err != nil {
				return fmt.Errorf("grant %s on %s: %w", role, ns, err)
			}
		}
	}
	// A client finds transaction coordinators by looking their topic up, which a broker allows
	// a role with produce or consume on it: alice (and the proxy, whose role it checks too).
	for _, role := range []string{"alice", proxyRole} {
		if n := r.State("TRANSACTION_COORDINATORS"); n == "" || n == "0" {
			break // an attached rig without them; transactions_test.go says so
		}
		if err := r.GrantTopicPermission(ctx, rig.TransactionCoordinatorTopic, role, "consume"); err != nil {
			return fmt.Errorf("grant %s on the transaction coordinators: %w", role, err)
		}
	}
	for _, t := range []string{"a-1", "a-2", "b-1"} {
		if err := r.CreateTopic(ctx, "persistent://"+nsListing+"/"+t); err != nil && !rig.IsStatus(err, 409) {
			return err
		}
	}
	return nil
}
