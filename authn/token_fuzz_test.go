package authn

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzTokenAuthenticate: whatever a client presents as a token, the provider does not panic,
// and a token it accepts really carries an HS256 signature by the key, is not expired, and
// names the role it was accepted as.
func FuzzTokenAuthenticate(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sign := func(claims jwt.MapClaims, m jwt.SigningMethod, k any) string {
		s, _ := jwt.NewWithClaims(m, claims).SignedString(k)
		return s
	}
	exp := time.Now().Add(time.Hour).Unix()
	for _, s := range []string{
		sign(jwt.MapClaims{"sub": "alice", "exp": exp}, jwt.SigningMethodHS256, key),
		sign(jwt.MapClaims{"sub": "alice"}, jwt.SigningMethodHS256, key),
		sign(jwt.MapClaims{"sub": 7}, jwt.SigningMethodHS256, key),
		sign(jwt.MapClaims{"sub": "alice"}, jwt.SigningMethodHS256, []byte("another-key-another-key-another!")),
		"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.", "", "a.b.c", "...",
	} {
		f.Add([]byte(s))
	}
	p, err := NewTokenProvider(TokenConfig{SecretKey: key})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := p.Authenticate(Credentials{Method: methodToken, Data: data})
		if err != nil {
			return
		}
		claims := jwt.MapClaims{}
		tok, perr := jwt.ParseWithClaims(string(data), claims, func(*jwt.Token) (any, error) { return key, nil },
			jwt.WithValidMethods([]string{"HS256", "HS384", "HS512"}))
		if perr != nil || !tok.Valid {
			t.Fatalf("accepted %q as %q; the JWT library says %v", data, id.Role, perr)
		}
		if sub, _ := claims["sub"].(string); sub != id.Role || id.Role == "" {
			t.Fatalf("accepted %q as role %q; its sub is %v", data, id.Role, claims["sub"])
		}
	})
}
