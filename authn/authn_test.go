package authn

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("0123456789abcdef0123456789abcdef")

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) []byte {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s)
}

func TestTokenProvider(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	hs, err := NewTokenProvider(TokenConfig{SecretKey: secret, Leeway: 2 * time.Second, Audience: "pulsar"})
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := NewTokenProvider(TokenConfig{PublicKey: &rsaKey.PublicKey, RoleClaim: "role"})
	es, _ := NewTokenProvider(TokenConfig{PublicKey: &ecKey.PublicKey})
	other := []byte("another-key-another-key-another-key!")

	cases := []struct {
		name   string
		p      *TokenProvider
		token  []byte
		role   string
		reason Reason
	}{
		{"hs256 ok", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "aud": "pulsar"}), "alice", ""},
		{"token: prefix", hs, append([]byte("token:"), sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "aud": "pulsar"})...), "alice", ""},
		{"expired", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "aud": "pulsar", "exp": now.Add(-time.Minute).Unix()}), "", ReasonExpired},
		{"expired within leeway", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "aud": "pulsar", "exp": now.Add(-time.Second).Unix()}), "a", ""},
		{"not yet valid", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "aud": "pulsar", "nbf": now.Add(time.Minute).Unix()}), "", ReasonNotYetValid},
		{"other key", hs, sign(t, jwt.SigningMethodHS256, other, jwt.MapClaims{"sub": "a", "aud": "pulsar"}), "", ReasonBadSignature},
		{"wrong audience", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "aud": "kafka"}), "", ReasonBadAudience},
		{"no role", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"aud": "pulsar"}), "", ReasonNoRole},
		{"malformed", hs, []byte("not.a.jwt"), "", ReasonMalformed},
		{"empty", hs, nil, "", ReasonNoCredentials},
		{"alg none refused", hs, sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "a", "aud": "pulsar"}), "", ReasonBadSignature},
		{"rs256 ok, role claim", rs, sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"role": "bob"}), "bob", ""},
		{"hs256 token at rs256 provider", rs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"role": "bob"}), "", ReasonBadSignature},
		{"es256 ok", es, sign(t, jwt.SigningMethodES256, ecKey, jwt.MapClaims{"sub": "carol"}), "carol", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := c.p.Authenticate(Credentials{Method: methodToken, Data: c.token})
			if got := ReasonOf(err); got != c.reason {
				t.Fatalf("reason %q, want %q (err %v)", got, c.reason, err)
			}
			if id.Role != c.role {
				t.Fatalf("role %q, want %q", id.Role, c.role)
			}
		})
	}
}

func TestTokenExpiryIsKept(t *testing.T) {
	p, _ := NewTokenProvider(TokenConfig{SecretKey: secret, Leeway: time.Second})
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	id, err := p.Authenticate(Credentials{Method: methodToken, Data: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "exp": exp.Unix()})})
	if err != nil {
		t.Fatal(err)
	}
	if !id.Expires.Equal(exp.Add(time.Second)) || id.Expired(exp) || !id.Expired(exp.Add(time.Second)) {
		t.Fatalf("expires %v, want %v plus leeway", id.Expires, exp)
	}
}

func TestNewTokenProviderRefusesShortSecret(t *testing.T) {
	if _, err := NewTokenProvider(TokenConfig{SecretKey: []byte("short")}); err == nil {
		t.Fatal("a 5-byte HS256 key was accepted")
	}
	if _, err := NewTokenProvider(TokenConfig{}); err == nil {
		t.Fatal("a provider without keys was accepted")
	}
}

func TestReadKeys(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "secret.raw")
	os.WriteFile(raw, []byte{0xff, 0x00, 0x01, 0xfe}, 0o600)
	if k, err := ReadSecretKey(raw); err != nil || len(k) != 4 || k[0] != 0xff {
		t.Fatalf("raw key: %q %v", k, err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	pub := filepath.Join(dir, "ec.pem")
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	k, err := ReadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := k.(*ecdsa.PublicKey); !ok {
		t.Fatalf("got %T", k)
	}
	if _, err := ReadPublicKey(raw); err == nil {
		t.Fatal("a secret key was read as a public key")
	}
}

func TestAuthenticator(t *testing.T) {
	hs, _ := NewTokenProvider(TokenConfig{SecretKey: secret})
	strict := NewAuthenticator("", hs, TLSProvider{})
	open := NewAuthenticator("guest", hs)
	good := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice"})

	if id, err := strict.Authenticate(Credentials{Method: "token", Data: good}); err != nil || id.Role != "alice" {
		t.Fatalf("token: %v %v", id, err)
	}
	if _, err := strict.Authenticate(Credentials{}); ReasonOf(err) != ReasonNoCredentials {
		t.Fatalf("no credentials without anonymous role: %v", err)
	}
	if id, err := open.Authenticate(Credentials{}); err != nil || id.Role != "guest" || id.Method != "anonymous" {
		t.Fatalf("anonymous: %v %v", id, err)
	}
	if _, err := open.Authenticate(Credentials{Method: "kerberos", Data: []byte("x")}); ReasonOf(err) != ReasonUnknownMethod {
		t.Fatalf("unknown method: %v", err)
	}
	// A bad token is not waved through as anonymous.
	if _, err := open.Authenticate(Credentials{Method: "token", Data: []byte("garbage")}); ReasonOf(err) != ReasonMalformed {
		t.Fatalf("bad token with anonymous on: %v", err)
	}
	if _, err := strict.Authenticate(Credentials{Method: "tls"}); ReasonOf(err) != ReasonNoCertificate {
		t.Fatalf("tls without certificate: %v", err)
	}
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "svc-a"}}
	if id, err := strict.Authenticate(Credentials{Method: "tls", PeerCertificates: []*x509.Certificate{cert}}); err != nil || id.Role != "svc-a" {
		t.Fatalf("tls: %v %v", id, err)
	}
}

func TestMetricsBoundMethodLabel(t *testing.T) {
	reg := promtest.New()
	m := NewMetrics(reg)
	m.AuthFailure("made-up-by-client", ReasonUnknownMethod)
	if got := reg.Value(t, "pulsar_proxy_authentication_failures_total", "method", "other", "reason", string(ReasonUnknownMethod)); got != 1 {
		t.Fatalf("got %v", got)
	}
}

// TestSecretKeyFileAsPulsarReadsIt: Pulsar's token provider takes a tokenSecretKey file's
// bytes as the key, as they are (AuthTokenUtils.readKeyFromUrl reads file:///path and a bare
// path with readAllBytes; only a tokenSecretKey that is itself data:;base64,… or base64 is
// decoded). A file of base64 text, a data: URL or a trailing newline is part of the key here
// too: a token signed with those bytes verifies, one signed with the decoded key does not.
func TestSecretKeyFileAsPulsarReadsIt(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content []byte
		looks   string // EncodedSecretKey
	}{
		{"random bytes", secret, ""},
		{"base64 text", []byte(base64.StdEncoding.EncodeToString(secret)), "base64 text"},
		{"base64 text and a newline", []byte(base64.StdEncoding.EncodeToString(secret) + "\n"), "base64 text"},
		{"a data: URL", []byte("data:;base64," + base64.StdEncoding.EncodeToString(secret)), "a data: URL"},
		{"a passphrase", []byte("correct horse battery staple, 32+ bytes long\n"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			key, err := ReadSecretKey(path)
			if err != nil || !bytes.Equal(key, tc.content) {
				t.Fatalf("key %q (%v), want the file's bytes %q", key, err, tc.content)
			}
			if got := EncodedSecretKey(key); got != tc.looks {
				t.Errorf("EncodedSecretKey %q, want %q", got, tc.looks)
			}
			p, err := NewTokenProvider(TokenConfig{SecretKey: key})
			if err != nil {
				t.Fatal(err)
			}
			signed := func(k []byte) []byte { return sign(t, jwt.SigningMethodHS256, k, jwt.MapClaims{"sub": "alice"}) }
			if _, err := p.Authenticate(Credentials{Method: "token", Data: signed(tc.content)}); err != nil {
				t.Errorf("a token signed with the file's bytes: %v", err)
			}
			if tc.looks != "" {
				if _, err := p.Authenticate(Credentials{Method: "token", Data: signed(secret)}); err == nil {
					t.Error("a token signed with the key the file decodes to was accepted")
				}
			}
		})
	}
}
