package authn

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// methodToken is the auth_method_name of JWT tokens in Pulsar clients.
const methodToken = "token"

// TokenConfig configures JWT validation.
type TokenConfig struct {
	SecretKey []byte           // HS256 key (nil: no HMAC)
	PublicKey crypto.PublicKey // RS256 or ES256 key (nil: none)
	RoleClaim string           // default "sub"
	Leeway    time.Duration    // allowed clock skew on exp and nbf
	Audience  string           // "": not checked
	Issuers   []string         // non-empty: iss must be one of these
	// JWKS gives the keys by kid (an identity provider's key set). It excludes SecretKey and
	// PublicKey, allows only asymmetric algorithms, and needs Issuers.
	JWKS *JWKS
}

// TokenProvider authenticates Pulsar JWT tokens.
type TokenProvider struct {
	cfg     TokenConfig
	methods []string
}

// NewTokenProvider checks the configuration and returns the provider.
func NewTokenProvider(cfg TokenConfig) (*TokenProvider, error) {
	if cfg.RoleClaim == "" {
		cfg.RoleClaim = "sub"
	}
	p := &TokenProvider{cfg: cfg}
	if cfg.JWKS != nil {
		return p.withJWKS()
	}
	if cfg.SecretKey != nil {
		if len(cfg.SecretKey) < 32 {
			return nil, fmt.Errorf("token secret key has %d bytes; HS256 needs at least 32", len(cfg.SecretKey))
		}
		p.methods = append(p.methods, jwt.SigningMethodHS256.Alg())
	}
	if cfg.PublicKey != nil {
		switch cfg.PublicKey.(type) {
		case *rsa.PublicKey:
			p.methods = append(p.methods, jwt.SigningMethodRS256.Alg())
		case *ecdsa.PublicKey:
			p.methods = append(p.methods, jwt.SigningMethodES256.Alg())
		default:
			return nil, fmt.Errorf("token public key of type %T: want RSA or EC", cfg.PublicKey)
		}
	}
	if len(p.methods) == 0 {
		return nil, errors.New("token authentication needs a secret key or a public key")
	}
	return p, nil
}

func (p *TokenProvider) withJWKS() (*TokenProvider, error) {
	if p.cfg.SecretKey != nil || p.cfg.PublicKey != nil {
		return nil, errors.New("a JWKS excludes a static secret or public key")
	}
	if len(p.cfg.Issuers) == 0 {
		// Any token the provider signs, for any of its applications, would pass.
		return nil, errors.New("a JWKS needs the allowed issuers")
	}
	p.methods = jwksAlgs
	return p, nil
}

// Method is "token".
func (*TokenProvider) Method() string { return methodToken }

// Authenticate validates the token in c.Data and names its role.
func (p *TokenProvider) Authenticate(c Credentials) (Identity, error) {
	return p.validate(string(c.Data), time.Now())
}

func (p *TokenProvider) validate(raw string, now time.Time) (Identity, error) {
	// Pulsar clients may send the token with its "token:" prefix or as the raw JWT.
	raw = strings.TrimSpace(strings.TrimPrefix(raw, "token:"))
	if raw == "" {
		return Identity{}, &Error{Method: methodToken, Reason: ReasonNoCredentials, Detail: "empty token"}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(p.methods),
		jwt.WithLeeway(p.cfg.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
	}
	if p.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(p.cfg.Audience))
	}
	keyFunc := p.key
	if p.cfg.JWKS != nil {
		// An identity provider's tokens always expire; one that does not is not its.
		keyFunc = p.jwksKey
		opts = append(opts, jwt.WithExpirationRequired())
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, keyFunc, opts...)
	if err != nil {
		return Identity{}, tokenError(err)
	}
	if err := p.checkIssuer(claims); err != nil {
		return Identity{}, err
	}
	role, _ := claims[p.cfg.RoleClaim].(string)
	if role == "" {
		return Identity{}, &Error{Method: methodToken, Reason: ReasonNoRole, Detail: fmt.Sprintf("token has no %q claim", p.cfg.RoleClaim)}
	}
	id := Identity{Role: role, Method: methodToken}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		id.Expires = exp.Add(p.cfg.Leeway)
	}
	return id, nil
}

func (p *TokenProvider) key(t *jwt.Token) (any, error) {
	switch t.Method.(type) {
	case *jwt.SigningMethodHMAC:
		if p.cfg.SecretKey != nil {
			return p.cfg.SecretKey, nil
		}
	default:
		if p.cfg.PublicKey != nil {
			return p.cfg.PublicKey, nil
		}
	}
	return nil, fmt.Errorf("no key for %s", t.Method.Alg())
}

// jwksKey picks the key of the token's kid, and refuses an algorithm its type does not allow
// (the parser has already refused "none" and HS*).
func (p *TokenProvider) jwksKey(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	k, err := p.cfg.JWKS.keyFor(kid)
	if err != nil {
		return nil, err
	}
	if alg := t.Method.Alg(); !k.allows(alg) {
		return nil, &Error{Method: methodToken, Reason: ReasonBadSignature, Detail: fmt.Sprintf("alg %s does not fit key %q", alg, kid)}
	}
	return k.key, nil
}

func (p *TokenProvider) checkIssuer(claims jwt.MapClaims) error {
	if len(p.cfg.Issuers) == 0 {
		return nil
	}
	iss, _ := claims.GetIssuer()
	if slices.Contains(p.cfg.Issuers, iss) {
		return nil
	}
	return &Error{Method: methodToken, Reason: ReasonBadIssuer, Detail: fmt.Sprintf("token issuer %q is not trusted", iss)}
}

func tokenError(err error) *Error {
	var own *Error
	if errors.As(err, &own) { // from a key function: it knows best
		return own
	}
	e := &Error{Method: methodToken, Detail: err.Error()}
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		e.Reason, e.Detail = ReasonExpired, "token is expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		e.Reason, e.Detail = ReasonNotYetValid, "token is not valid yet"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		e.Reason = ReasonBadSignature
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		e.Reason, e.Detail = ReasonBadAudience, "token audience does not match"
	default:
		e.Reason = ReasonMalformed
	}
	return e
}

// ReadSecretKey reads an HS256 key file as Pulsar's token provider reads tokenSecretKey's
// file:///path, or a path (AuthTokenUtils.readKeyFromUrl, Pulsar 4.0.8): all of its bytes, as
// they are. A file of base64 text, or of a data:;base64,… URL, is that text, not the key it
// decodes to (Pulsar decodes only a tokenSecretKey that is itself such a URL or base64, never
// a file's content), so that one key file means one key to brokers and proxy alike;
// EncodedSecretKey says when a file looks as if it meant another.
func ReadSecretKey(path string) ([]byte, error) {
	return os.ReadFile(path)
}

// EncodedSecretKey says what a secret key's bytes look like when they look like the encoding
// of another key: "base64 text" or "a data: URL"; "" otherwise (a key of random bytes). The
// key is still these bytes, for Pulsar as here; brokers given the key they decode to
// (tokenSecretKey=data:;base64,…) hold another one.
func EncodedSecretKey(key []byte) string {
	s := strings.TrimSpace(string(key))
	if strings.HasPrefix(s, "data:") {
		return "a data: URL"
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if d, err := enc.DecodeString(s); err == nil && len(d) >= 32 {
			return "base64 text"
		}
	}
	return ""
}

// ReadPublicKey reads a PEM public key (RSA or EC) for RS256/ES256 tokens.
func ReadPublicKey(path string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if k, err := jwt.ParseRSAPublicKeyFromPEM(b); err == nil {
		return k, nil
	}
	k, err := jwt.ParseECPublicKeyFromPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: not a PEM RSA or EC public key", path)
	}
	return k, nil
}
