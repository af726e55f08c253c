package e2eauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

const (
	idpIssuer   = "https://idp.e2e.test/realms/pulsar"
	idpAudience = "pulsar"
)

// identityProvider is an OpenID Connect provider as far as the proxy sees one: a JWKS
// endpoint on 127.0.0.1, and the private keys to sign its tokens.
type identityProvider struct {
	srv  *httptest.Server
	doc  atomic.Pointer[[]byte]
	keys map[string]any // kid → private key
}

func newIdentityProvider(t *testing.T) *identityProvider {
	t.Helper()
	p := &identityProvider{keys: map[string]any{}}
	p.publish()
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(*p.doc.Load())
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// addKey makes a key and publishes the key set with it.
func (p *identityProvider) addKey(t *testing.T, kid string, ec bool) {
	t.Helper()
	var key any
	var err error
	if ec {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	} else {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.keys[kid] = key
	p.publish()
}

func (p *identityProvider) publish() {
	var keys []map[string]string
	for kid, k := range p.keys {
		keys = append(keys, publicJWK(kid, k))
	}
	doc, _ := json.Marshal(map[string]any{"keys": keys})
	p.doc.Store(&doc)
}

func publicJWK(kid string, key any) map[string]string {
	enc := base64.RawURLEncoding.EncodeToString
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
			"n": enc(k.N.Bytes()), "e": enc(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PrivateKey:
		raw, _ := k.PublicKey.Bytes() // 0x04 || x || y, 32 bytes each on P-256
		return map[string]string{"kty": "EC", "kid": kid, "use": "sig", "crv": "P-256", "x": enc(raw[1:33]), "y": enc(raw[33:])}
	}
	panic(fmt.Sprintf("key of type %T", key))
}

// sign mints a one-hour token for role, signed with key under kid, as the provider would.
func signIDP(t *testing.T, kid string, key any, role string) string {
	t.Helper()
	method := jwt.SigningMethod(jwt.SigningMethodRS256)
	if _, ec := key.(*ecdsa.PrivateKey); ec {
		method = jwt.SigningMethodES256
	}
	tok := jwt.NewWithClaims(method, jwt.MapClaims{"sub": role, "iss": idpIssuer, "aud": idpAudience,
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (p *identityProvider) token(t *testing.T, kid, role string) string {
	return signIDP(t, kid, p.keys[kid], role)
}

// startJWKSProxy runs the proxy in front of r, validating client tokens against idp's key
// set only (no static key), with the proxy's own HS256 token towards the brokers.
func startJWKSProxy(t *testing.T, r *rig.Rig, idp *identityProvider) *proxy {
	t.Helper()
	dir := t.TempDir()
	tokenFile := proxyTokenFile(t, dir)
	yaml := fmt.Sprintf(`auth:
  enabled: true
  token:
    jwksURL: %q
    issuers: [%q]
    audience: %q
    jwksMinRefetchInterval: 1s
  brokerClient:
    tokenFile: %q
`, idp.srv.URL+"/realms/pulsar/protocol/openid-connect/certs", idpIssuer, idpAudience, tokenFile)
	return &proxy{Proc: runProxy(t, dir, r, yaml)}
}

// waitMetric waits until the proxy's metric reaches want.
func (p *proxy) waitMetric(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	if !wait.Within(20*time.Second, func() bool { return p.metric(t, name, labels...) >= want }) {
		t.Fatalf("%s%v = %v after 20s, want %v", name, labels, p.metric(t, name, labels...), want)
	}
}

// Clients authenticate with tokens of an OpenID Connect provider that neither the proxy's
// configuration nor the brokers hold a key of: the proxy checks them against the provider's
// JWKS and names the role to the trusting brokers, which authorize it. Alice (RS256) is
// granted on nsAliceOnly; bob (ES256) is authenticated but refused there by the broker; a
// token of a key outside the key set is refused by the proxy; a key the provider adds later
// is picked up by the refetch its first token triggers.
func TestJWKSTokensThroughTheProxy(t *testing.T) {
	r := trustingRig(t)
	idp := newIdentityProvider(t)
	idp.addKey(t, "rsa-1", false)
	idp.addKey(t, "ec-1", true)
	p := startJWKSProxy(t, r, idp)
	p.waitMetric(t, 2, "pulsar_proxy_jwks_keys")

	topic := uniqueTopic(nsAliceOnly, "jwks")
	produceConsume(t, client(t, p.PulsarURL, pulsar.NewAuthenticationToken(idp.token(t, "rsa-1", "alice"))), topic, 10)

	bob := client(t, p.PulsarURL, pulsar.NewAuthenticationToken(idp.token(t, "ec-1", "bob")))
	_, err := bob.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "Authorization") {
		t.Fatalf("bob's producer: err = %v, want the broker's authorization refusal", err)
	}
	t.Logf("bob refused by the broker: %v", err)
	if got := p.count(t, "pulsar_proxy_authentication_failures_total"); got != 0 {
		t.Fatalf("%v authentication failures at the proxy; alice and bob both hold valid tokens", got)
	}

	t.Run("key added by the provider", func(t *testing.T) {
		idp.addKey(t, "rsa-2", false)
		time.Sleep(time.Second) // jwksMinRefetchInterval since the last fetch
		before := p.metric(t, "pulsar_proxy_jwks_fetches_total", `result="ok"`)
		produceConsume(t, client(t, p.PulsarURL, pulsar.NewAuthenticationToken(idp.token(t, "rsa-2", "alice"))), uniqueTopic(nsAliceOnly, "jwks-rotated"), 5)
		if got := p.metric(t, "pulsar_proxy_jwks_fetches_total", `result="ok"`); got != before+1 {
			t.Fatalf("ok fetches %v → %v, want one refetch for the new kid", before, got)
		}
		if got := p.metric(t, "pulsar_proxy_jwks_keys"); got != 3 {
			t.Fatalf("keys %v, want 3", got)
		}
	})

	t.Run("key outside the key set", func(t *testing.T) {
		stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
		for _, tc := range []struct{ kid, reason string }{
			{"stranger", "unknown_key"}, // a kid the provider never published
			{"rsa-1", "bad_signature"},  // a published kid, a key that is not its
		} {
			forged := signIDP(t, tc.kid, stranger, "alice")
			_, err := clientWithTimeout(t, p.PulsarURL, pulsar.NewAuthenticationToken(forged), 3*time.Second).
				CreateProducer(pulsar.ProducerOptions{Topic: topic})
			if err == nil {
				t.Fatalf("kid %s: a forged token created a producer", tc.kid)
			}
			labels := []string{`method="token"`, `reason="` + tc.reason + `"`}
			if got := p.metric(t, "pulsar_proxy_authentication_failures_total", labels...); got < 1 {
				t.Fatalf("failures%v = %v (client error: %v)", labels, got, err)
			}
			_, _, resp := rawConnect(t, p.Addr, "token", []byte(forged))
			if resp.GetError().GetError() != pb.ServerError_AuthenticationError || !strings.Contains(resp.GetError().GetMessage(), tc.reason) {
				t.Fatalf("kid %s: got %v, want AuthenticationError saying %s", tc.kid, resp, tc.reason)
			}
			t.Logf("kid %s refused: %s", tc.kid, resp.GetError().GetMessage())
		}
	})
}
