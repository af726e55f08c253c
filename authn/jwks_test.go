package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"
)

const testIssuer = "https://idp.test/realms/pulsar"

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// publicJWK is the JWKS entry of key's public half.
func publicJWK(kid string, key any) map[string]string {
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PrivateKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		raw, _ := k.PublicKey.Bytes() // 0x04 || x || y
		return map[string]string{"kty": "EC", "kid": kid, "crv": k.Curve.Params().Name, "x": b64(raw[1 : 1+size]), "y": b64(raw[1+size:])}
	}
	panic("unknown key type")
}

func jwksDoc(keys ...map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// idp is a fake identity provider's JWKS endpoint.
type idp struct {
	*httptest.Server
	doc     atomic.Pointer[[]byte]
	down    atomic.Bool
	fetches atomic.Int32
}

func newIDP(t *testing.T, keys ...map[string]string) *idp {
	t.Helper()
	p := &idp{}
	p.publish(keys...)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		if p.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(*p.doc.Load())
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *idp) publish(keys ...map[string]string) {
	d := jwksDoc(keys...)
	p.doc.Store(&d)
}

// fakeClock is a settable time for the refetch rate limit.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newTestJWKS is a key set fetched from url, and the registry of its metrics.
func newTestJWKS(t *testing.T, url string, minRefetch time.Duration) (*JWKS, *promtest.Registry) {
	t.Helper()
	reg := promtest.New()
	s, err := NewJWKS(JWKSConfig{URL: url, RefreshInterval: time.Hour, MinRefetchInterval: minRefetch, Timeout: 5 * time.Second}, NewJWKSMetrics(reg), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.client.CloseIdleConnections)
	return s, reg
}

func jwksProvider(t *testing.T, s *JWKS) *TokenProvider {
	t.Helper()
	p, err := NewTokenProvider(TokenConfig{JWKS: s, Issuers: []string{testIssuer}, Audience: "pulsar", Leeway: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// signKid signs claims (with the test issuer, audience and an hour's life unless set) under kid.
func signKid(t *testing.T, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) []byte {
	t.Helper()
	full := jwt.MapClaims{"iss": testIssuer, "aud": "pulsar", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		if v == nil {
			delete(full, k)
		} else {
			full[k] = v
		}
	}
	tok := jwt.NewWithClaims(m, full)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s)
}

func authenticate(p *TokenProvider, token []byte) (Identity, error) {
	return p.Authenticate(Credentials{Method: methodToken, Data: token})
}

func TestJWKSTokens(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
	srv := newIDP(t, publicJWK("rsa", rsaKey), publicJWK("p256", p256), publicJWK("p384", p384), publicJWK("p521", p521))
	s, _ := newTestJWKS(t, srv.URL, time.Hour)
	p := jwksProvider(t, s)

	// Alg confusion: an HS256 token whose HMAC key is the RSA public key as a verifier
	// that mixed up key types would read it (PEM and DER).
	der, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})

	cases := []struct {
		name   string
		token  []byte
		role   string
		reason Reason
	}{
		{"RS256", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice"}), "alice", ""},
		{"PS384", signKid(t, jwt.SigningMethodPS384, rsaKey, "rsa", jwt.MapClaims{"sub": "alice"}), "alice", ""},
		{"ES256", signKid(t, jwt.SigningMethodES256, p256, "p256", jwt.MapClaims{"sub": "bob"}), "bob", ""},
		{"ES384", signKid(t, jwt.SigningMethodES384, p384, "p384", jwt.MapClaims{"sub": "carol"}), "carol", ""},
		{"ES512", signKid(t, jwt.SigningMethodES512, p521, "p521", jwt.MapClaims{"sub": "dave"}), "dave", ""},
		{"audience list", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice", "aud": []string{"web", "pulsar"}}), "alice", ""},
		{"wrong issuer", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice", "iss": "https://evil.test"}), "", ReasonBadIssuer},
		{"no issuer", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice", "iss": nil}), "", ReasonBadIssuer},
		{"wrong audience", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice", "aud": "kafka"}), "", ReasonBadAudience},
		{"expired", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}), "", ReasonExpired},
		{"not yet valid", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice", "nbf": time.Now().Add(time.Minute).Unix()}), "", ReasonNotYetValid},
		{"no exp", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", jwt.MapClaims{"sub": "alice", "exp": nil}), "", ReasonMalformed},
		{"no role", signKid(t, jwt.SigningMethodRS256, rsaKey, "rsa", nil), "", ReasonNoRole},
		{"signed by a stranger under a known kid", signKid(t, jwt.SigningMethodRS256, stranger, "rsa", jwt.MapClaims{"sub": "alice"}), "", ReasonBadSignature},
		{"unknown kid", signKid(t, jwt.SigningMethodRS256, stranger, "stranger", jwt.MapClaims{"sub": "alice"}), "", ReasonUnknownKey},
		{"no kid, several keys", signKid(t, jwt.SigningMethodRS256, rsaKey, "", jwt.MapClaims{"sub": "alice"}), "", ReasonUnknownKey},
		{"HS256 with the RSA key's PEM", signKid(t, jwt.SigningMethodHS256, pemKey, "rsa", jwt.MapClaims{"sub": "alice"}), "", ReasonBadSignature},
		{"HS256 with the RSA key's DER", signKid(t, jwt.SigningMethodHS256, der, "rsa", jwt.MapClaims{"sub": "alice"}), "", ReasonBadSignature},
		{"alg none", signKid(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "rsa", jwt.MapClaims{"sub": "alice"}), "", ReasonBadSignature},
		{"RS256 under an EC kid", signKid(t, jwt.SigningMethodRS256, rsaKey, "p256", jwt.MapClaims{"sub": "alice"}), "", ReasonBadSignature},
		{"ES384 under a P-256 kid", signKid(t, jwt.SigningMethodES384, p384, "p256", jwt.MapClaims{"sub": "alice"}), "", ReasonBadSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := authenticate(p, c.token)
			if got := ReasonOf(err); got != c.reason {
				t.Fatalf("reason %q, want %q (err %v)", got, c.reason, err)
			}
			if id.Role != c.role {
				t.Fatalf("role %q, want %q", id.Role, c.role)
			}
			if c.reason == "" && id.Expires.IsZero() {
				t.Fatal("identity without expiry")
			}
		})
	}
}

func TestJWKSTokenWithoutKidAndOneKey(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s, _ := newTestJWKS(t, newIDP(t, publicJWK("only", key)).URL, time.Hour)
	if id, err := authenticate(jwksProvider(t, s), signKid(t, jwt.SigningMethodES256, key, "", jwt.MapClaims{"sub": "alice"})); err != nil || id.Role != "alice" {
		t.Fatalf("%+v, %v", id, err)
	}
}

func TestNewTokenProviderJWKSRules(t *testing.T) {
	s, _ := newTestJWKS(t, "http://127.0.0.1:1/jwks", time.Hour)
	if _, err := NewTokenProvider(TokenConfig{JWKS: s}); err == nil {
		t.Error("a JWKS without issuers was accepted")
	}
	if _, err := NewTokenProvider(TokenConfig{JWKS: s, Issuers: []string{testIssuer}, SecretKey: secret}); err == nil {
		t.Error("a JWKS with a secret key was accepted")
	}
}

// Rotation: the provider adds a new key and drops the old one. A token of the new kid makes
// the proxy fetch the set at once; the old kid is then unknown.
func TestJWKSKeyRotation(t *testing.T) {
	oldKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	newKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	srv := newIDP(t, publicJWK("2026-01", oldKey))
	s, reg := newTestJWKS(t, srv.URL, time.Minute)
	clock := &fakeClock{t: time.Now()}
	s.now = clock.now
	p := jwksProvider(t, s)
	if err := s.refresh(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	oldToken := signKid(t, jwt.SigningMethodRS256, oldKey, "2026-01", jwt.MapClaims{"sub": "alice"})
	newToken := signKid(t, jwt.SigningMethodRS256, newKey, "2026-02", jwt.MapClaims{"sub": "alice"})
	if _, err := authenticate(p, oldToken); err != nil {
		t.Fatal(err)
	}

	srv.publish(publicJWK("2026-02", newKey))
	clock.advance(time.Minute)
	if _, err := authenticate(p, newToken); err != nil {
		t.Fatalf("token of the new kid: %v", err)
	}
	if got := srv.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches, want 2 (start, then the new kid)", got)
	}
	if _, err := authenticate(p, oldToken); ReasonOf(err) != ReasonUnknownKey {
		t.Fatalf("token of the removed kid: %v, want unknown_key", err)
	}
	if got := reg.Value(t, "pulsar_proxy_jwks_keys"); got != 1 {
		t.Fatalf("keys gauge %v, want 1", got)
	}
}

// A flood of made-up kids makes at most one fetch per MinRefetchInterval.
func TestJWKSUnknownKidRefetchIsRateLimited(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	srv := newIDP(t, publicJWK("real", key))
	s, reg := newTestJWKS(t, srv.URL, 10*time.Second)
	clock := &fakeClock{t: time.Now()}
	s.now = clock.now
	p := jwksProvider(t, s)
	if err := s.refresh(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	flood := func() {
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				bogus := signKid(t, jwt.SigningMethodRS256, key, "bogus-"+string(rune('a'+i%26))+time.Now().String(), jwt.MapClaims{"sub": "x"})
				if _, err := authenticate(p, bogus); ReasonOf(err) != ReasonUnknownKey {
					t.Errorf("bogus kid: %v", err)
				}
			})
		}
		wg.Wait()
	}
	flood() // the start's fetch was just now: no refetch
	if got := srv.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches after a flood within the interval, want 1", got)
	}
	clock.advance(10 * time.Second)
	flood()
	if got := srv.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches after a flood one interval later, want 2", got)
	}
	if got := reg.Value(t, "pulsar_proxy_jwks_fetches_total", "result", "ok"); got != 2 {
		t.Fatalf("ok fetches %v, want 2", got)
	}
}

// The proxy starts while the provider is down: tokens are refused (unknown_key) until the
// key set arrives; later failures keep the last good set.
func TestJWKSProviderDownAtStart(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := newIDP(t, publicJWK("k1", key))
	srv.down.Store(true)
	s, reg := newTestJWKS(t, srv.URL, 20*time.Millisecond)
	p := jwksProvider(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	token := signKid(t, jwt.SigningMethodES256, key, "k1", jwt.MapClaims{"sub": "alice"})
	wait.Until(t, 10*time.Second, "two failed fetches of the key set", func() bool {
		return reg.Value(t, "pulsar_proxy_jwks_fetches_total", "result", "error") >= 2
	})
	_, err := authenticate(p, token)
	if ReasonOf(err) != ReasonUnknownKey || !strings.Contains(err.Error(), "not available yet") {
		t.Fatalf("while the provider is down: %v", err)
	}
	if got := reg.Value(t, "pulsar_proxy_jwks_last_success_timestamp_seconds"); got != 0 {
		t.Fatalf("last success %v before any", got)
	}

	srv.down.Store(false)
	wait.Until(t, 10*time.Second, "the token to be accepted once the provider is back", func() bool {
		_, err := authenticate(p, token)
		return err == nil
	})
	if got := reg.Value(t, "pulsar_proxy_jwks_last_success_timestamp_seconds"); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last success %v", got)
	}

	srv.down.Store(true)
	errs := reg.Value(t, "pulsar_proxy_jwks_fetches_total", "result", "error")
	if err := s.refresh(ctx, "test"); err == nil {
		t.Fatal("refresh from a provider that is down succeeded")
	}
	// Run may be failing beside this refresh (it retries fast until its own first success).
	if reg.Value(t, "pulsar_proxy_jwks_fetches_total", "result", "error") < errs+1 {
		t.Fatal("failed fetch not counted")
	}
	if _, err := authenticate(p, token); err != nil {
		t.Fatalf("the last good key set was not kept: %v", err)
	}
}

func TestParseJWKS(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	with := func(m map[string]string, k, v string) map[string]string {
		c := map[string]string{}
		for a, b := range m {
			c[a] = b
		}
		c[k] = v
		return c
	}
	good := publicJWK("ok", rsaKey)
	offCurve := with(publicJWK("off", ec), "y", publicJWK("off", ec)["x"])
	cases := []struct {
		name    string
		key     map[string]string
		skipped string // "" = usable
	}{
		{"rsa", good, ""},
		{"ec", publicJWK("ec", ec), ""},
		{"padded base64", with(good, "n", base64.URLEncoding.EncodeToString(rsaKey.N.Bytes())), ""},
		{"pinned alg", with(good, "alg", "PS256"), ""},
		{"symmetric", map[string]string{"kty": "oct", "kid": "hs", "k": b64(secret)}, `kty "oct"`},
		{"encryption key", with(good, "use", "enc"), `use "enc"`},
		{"weak rsa", publicJWK("weak", weak), "1024 bits"},
		{"alg of another type", with(publicJWK("ec", ec), "alg", "RS256"), `alg "RS256" does not fit`},
		{"HS256 pinned on RSA", with(good, "alg", "HS256"), `alg "HS256" does not fit`},
		{"unknown curve", with(publicJWK("ec", ec), "crv", "secp256k1"), "crv"},
		{"point off the curve", offCurve, "not a point"},
		{"short x", with(publicJWK("ec", ec), "x", b64([]byte{1, 2})), "32 bytes"},
		{"even exponent", with(good, "e", b64([]byte{2})), "exponent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			other := publicJWK("other", rsaKey) // keeps the document valid when c.key is skipped
			set, skipped, err := parseJWKS(jwksDoc(c.key, other))
			if err != nil {
				t.Fatal(err)
			}
			_, ok := set.byKID[c.key["kid"]]
			switch {
			case c.skipped == "" && (!ok || len(skipped) != 0):
				t.Fatalf("usable key not taken: %v", skipped)
			case c.skipped != "" && (ok || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), c.skipped)):
				t.Fatalf("skipped %v, want one saying %q", skipped, c.skipped)
			}
		})
	}
	set, skipped, err := parseJWKS(jwksDoc(good, publicJWK("ok", ec)))
	if err != nil || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "kid repeated") {
		t.Fatalf("repeated kid: skipped %v, err %v", skipped, err)
	}
	if _, isRSA := set.byKID["ok"].key.(*rsa.PublicKey); !isRSA {
		t.Fatal("a repeated kid replaced the first key")
	}
	for _, doc := range []string{`{"keys":[]}`, `not json`, `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`} {
		if _, _, err := parseJWKS([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", doc)
		}
	}
}

func TestJWKSFetchRefusesBadAnswers(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"status": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusNotFound) },
		"redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/", http.StatusFound)
		},
		"too big": func(w http.ResponseWriter, _ *http.Request) { w.Write(make([]byte, maxJWKSSize+1)) },
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			s, _ := newTestJWKS(t, srv.URL, time.Hour)
			if err := s.refresh(context.Background(), "test"); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
