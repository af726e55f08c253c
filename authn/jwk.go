package authn

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// minRSABits refuses keys too short to trust; identity providers use 2048 bits or more.
const minRSABits = 2048

var (
	rsaAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	// ecAlgs: each curve has exactly one JWS algorithm (RFC 7518, 3.4).
	ecAlgs = map[string]struct {
		curve elliptic.Curve
		alg   string
	}{
		"P-256": {elliptic.P256(), "ES256"},
		"P-384": {elliptic.P384(), "ES384"},
		"P-521": {elliptic.P521(), "ES512"},
	}
)

// jwksAlgs are the algorithms a JWKS key can verify: asymmetric only, never HS* or "none".
var jwksAlgs = append(slices.Clone(rsaAlgs), "ES256", "ES384", "ES512")

// verifyKey is one public key of a key set and the algorithms its type allows.
type verifyKey struct {
	kid  string
	key  crypto.PublicKey
	algs []string
}

// allows reports whether a token signed with alg may be checked with this key.
func (k verifyKey) allows(alg string) bool { return slices.Contains(k.algs, alg) }

// keySet is a parsed JWKS, indexed by kid.
type keySet struct {
	byKID map[string]verifyKey
}

// lookup finds the key of kid. A token without a kid can only mean the one key of a set
// that has exactly one.
func (s *keySet) lookup(kid string) (verifyKey, bool) {
	if s == nil {
		return verifyKey{}, false
	}
	if k, ok := s.byKID[kid]; ok {
		return k, true
	}
	if kid == "" && len(s.byKID) == 1 {
		for _, k := range s.byKID {
			return k, true
		}
	}
	return verifyKey{}, false
}

// kids lists the set's key ids, sorted (for logs).
func (s *keySet) kids() []string {
	if s == nil {
		return nil
	}
	ids := make([]string, 0, len(s.byKID))
	for id := range s.byKID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// jwk is one key of a JWKS document as JSON spells it (RFC 7517, 7518).
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads a JWKS document. Keys the proxy cannot or must not use (encryption keys,
// symmetric keys, unknown types, weak or broken keys, repeated kids) are left out and
// described in skipped; a document without any usable key is an error.
func parseJWKS(b []byte) (set *keySet, skipped []error, err error) {
	var doc struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("not a JWKS document: %w", err)
	}
	set = &keySet{byKID: map[string]verifyKey{}}
	for i, j := range doc.Keys {
		k, err := j.verifyKey()
		if err == nil {
			if _, dup := set.byKID[k.kid]; dup {
				err = errors.New("kid repeated")
			}
		}
		if err != nil {
			skipped = append(skipped, fmt.Errorf("key %d (kid %q): %w", i, j.Kid, err))
			continue
		}
		set.byKID[k.kid] = k
	}
	if len(set.byKID) == 0 {
		return nil, skipped, fmt.Errorf("no usable signature key among %d (%v)", len(doc.Keys), errors.Join(skipped...))
	}
	return set, skipped, nil
}

func (j jwk) verifyKey() (verifyKey, error) {
	if j.Use != "" && j.Use != "sig" {
		return verifyKey{}, fmt.Errorf("use %q is not sig", j.Use)
	}
	var k verifyKey
	var err error
	switch j.Kty {
	case "RSA":
		k, err = j.rsaKey()
	case "EC":
		k, err = j.ecKey()
	default:
		// "oct" above all: a shared secret in a public key set would let anyone sign.
		return verifyKey{}, fmt.Errorf("kty %q is not RSA or EC", j.Kty)
	}
	if err != nil {
		return verifyKey{}, err
	}
	k.kid = j.Kid
	if j.Alg != "" {
		// The provider pinned the algorithm: only that one, if the key type allows it.
		if !k.allows(j.Alg) {
			return verifyKey{}, fmt.Errorf("alg %q does not fit a %s key", j.Alg, j.Kty)
		}
		k.algs = []string{j.Alg}
	}
	return k, nil
}

func (j jwk) rsaKey() (verifyKey, error) {
	n, err := b64Int(j.N)
	if err != nil {
		return verifyKey{}, fmt.Errorf("n: %w", err)
	}
	e, err := b64Int(j.E)
	if err != nil {
		return verifyKey{}, fmt.Errorf("e: %w", err)
	}
	if n.BitLen() < minRSABits {
		return verifyKey{}, fmt.Errorf("RSA key of %d bits; at least %d needed", n.BitLen(), minRSABits)
	}
	if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
		return verifyKey{}, errors.New("RSA exponent out of range")
	}
	return verifyKey{key: &rsa.PublicKey{N: n, E: int(e.Int64())}, algs: rsaAlgs}, nil
}

func (j jwk) ecKey() (verifyKey, error) {
	c, ok := ecAlgs[j.Crv]
	if !ok {
		return verifyKey{}, fmt.Errorf("crv %q is not P-256, P-384 or P-521", j.Crv)
	}
	size := (c.curve.Params().BitSize + 7) / 8
	x, errX := b64Bytes(j.X)
	y, errY := b64Bytes(j.Y)
	if errX != nil || errY != nil || len(x) != size || len(y) != size {
		return verifyKey{}, fmt.Errorf("x and y must be %d bytes of base64url", size)
	}
	// ParseUncompressedPublicKey checks that the point is on the curve.
	key, err := ecdsa.ParseUncompressedPublicKey(c.curve, slices.Concat([]byte{4}, x, y))
	if err != nil {
		return verifyKey{}, fmt.Errorf("not a point of %s: %w", j.Crv, err)
	}
	return verifyKey{key: key, algs: []string{c.alg}}, nil
}

// b64Bytes decodes base64url; padding is tolerated, as some providers write it.
func b64Bytes(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("missing")
	}
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func b64Int(s string) (*big.Int, error) {
	b, err := b64Bytes(s)
	if err != nil {
		return nil, err
	}
	return new(big.Int).SetBytes(b), nil
}
