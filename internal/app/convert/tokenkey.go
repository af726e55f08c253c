package convert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tokenPublicKey maps tokenPublicKey to auth.token.publicKeyFile. Pulsar reads the key as DER
// (what `pulsar tokens create-key-pair` writes), from a file (file:///…, or a path) or inline
// (data:;base64,… or bare base64); pulsar-proxy reads a PEM file. A PEM file is used where it
// is. A DER key is written as PEM into opts.WriteDir (beside the -o FILE) and the config names
// that file; with nowhere to write it, the conversion fails with the fix named.
func (c *converter) tokenPublicKey(v string) {
	const key, to = "tokenPublicKey", "auth.token.publicKeyFile"
	src, isFile := keyPath(v)
	inline := !isFile
	var raw []byte
	if inline {
		b, err := inlineKey(v)
		if err != nil {
			c.dropped(key, fmt.Sprintf("the key is inline in proxy.conf but %v: write it to a file as PEM and set %s", err, to), true)
			c.problem(to, "tokenPublicKey could not be read: write the public key to a file as PEM and set "+to)
			return
		}
		raw = b
	} else {
		b, err := os.ReadFile(src)
		if err != nil {
			// Converted where the key is not: check-config (run here, and where the proxy
			// runs) says whether the file is there and PEM.
			c.put(to, src, "tokenPublicKey (a file)")
			c.mapped(key, to, fmt.Sprintf("could not be read here (%v): it must be a PEM public key where the proxy runs; a DER key (as Pulsar writes it) must be converted: %s", errors.Unwrap(err), opensslDER(src)), true)
			return
		}
		if block, _ := pem.Decode(b); block != nil {
			c.put(to, src, "tokenPublicKey (a PEM file)")
			c.mapped(key, to, "", false)
			return
		}
		raw = b
	}
	c.derPublicKey(raw, src, inline)
}

// derPublicKey maps a tokenPublicKey that is not PEM: a DER key is written as PEM beside the
// -o FILE, where there is one.
func (c *converter) derPublicKey(raw []byte, src string, inline bool) {
	const key, to = "tokenPublicKey", "auth.token.publicKeyFile"
	der, err := publicKeyDER(raw)
	if err != nil {
		where := "the inline key"
		if !inline {
			where = src
			c.put(to, src, "tokenPublicKey (a file)")
		}
		c.dropped(key, fmt.Sprintf("%s: %v", where, err), true)
		c.problem(to, fmt.Sprintf("%s: %v; pulsar-proxy reads an RSA or EC public key as PEM", where, err))
		return
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	name := "token-public-key.pem"
	if !inline {
		name = filepath.Base(src) + ".pem"
	}
	if c.opts.WriteDir == "" {
		fix := "run convert-config with -o FILE to have it written as PEM beside FILE, or " + opensslDER(src)
		if inline {
			fix = "run convert-config with -o FILE to have it written as PEM beside FILE, or write it to a file (base64 -d) and " + opensslDER("KEY")
			c.dropped(key, "an inline DER key: pulsar-proxy reads a PEM file; "+fix, true)
		} else {
			c.put(to, src, "tokenPublicKey (a DER file: convert it to PEM)")
			c.dropped(key, src+" is DER, as Pulsar writes it, and pulsar-proxy reads PEM; "+fix, true)
		}
		c.problem(to, "the token public key is DER and pulsar-proxy reads PEM: "+fix)
		return
	}
	path, err := c.writeFile(name, pemBytes, 0o644)
	if err != nil {
		c.dropped(key, fmt.Sprintf("the DER key could not be written as PEM: %v; %s", err, opensslDER(src)), true)
		c.problem(to, fmt.Sprintf("the token public key is DER and could not be written as PEM: %v", err))
		return
	}
	from := "the inline key"
	if !inline {
		from = src
	}
	c.put(to, path, "tokenPublicKey (DER, written as PEM by convert-config)")
	c.mapped(key, to, fmt.Sprintf("%s is DER, as Pulsar writes it: written as PEM to %s, which the config names; ship it with config.yaml (a Secret beside it)", from, path), true)
}

// opensslDER is the command that converts a DER public key to PEM.
func opensslDER(src string) string {
	if src == "" {
		src = "KEY"
	}
	return fmt.Sprintf("convert it: `openssl pkey -pubin -inform DER -in %s -out %s.pem`, and set auth.token.publicKeyFile to the PEM file", src, src)
}

// inlineKey decodes an inline key of proxy.conf: data:;base64,… or bare base64.
func inlineKey(v string) ([]byte, error) {
	s := strings.TrimSpace(v)
	if strings.HasPrefix(s, "data:") {
		_, data, ok := strings.Cut(s, ",")
		if !ok || !strings.Contains(s[:len(s)-len(data)], ";base64") {
			return nil, errors.New("it is not a data:;base64,… URL")
		}
		s = data
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("it is not base64")
	}
	return b, nil
}

// publicKeyDER returns the DER of an RSA or EC public key given as DER, or as the base64 text
// of DER.
func publicKeyDER(raw []byte) ([]byte, error) {
	der := raw
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		if d, err64 := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(raw))); err64 == nil {
			der = d
			k, err = x509.ParsePKIXPublicKey(der)
		}
	}
	if err != nil {
		return nil, errors.New("not a public key in DER or PEM")
	}
	switch k.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
		return der, nil
	}
	return nil, fmt.Errorf("a %T: pulsar-proxy verifies tokens with RSA (RS256) or EC (ES256) keys only", k)
}

// tokenSecretKeyFile maps a tokenSecretKey file as it is: Pulsar and pulsar-proxy both take
// the file's bytes as the key (authn.ReadSecretKey), base64 text or not. check-config (run on
// the result) says whether the file is there and long enough.
func (c *converter) tokenSecretKeyFile(path string) {
	c.put("auth.token.secretKeyFile", path, "tokenSecretKey (a file)")
	c.mapped("tokenSecretKey", "auth.token.secretKeyFile", "the file's bytes are the key, for Pulsar and pulsar-proxy alike", false)
}

// tokenSecretKeyInline writes an inline tokenSecretKey (data:;base64,… or base64) into
// opts.WriteDir as the key's bytes (what auth.token.secretKeyFile reads).
func (c *converter) tokenSecretKeyInline(v string) {
	const key, to = "tokenSecretKey", "auth.token.secretKeyFile"
	b, err := inlineKey(v)
	if err != nil || len(b) == 0 {
		c.dropped(key, "the key is inline in proxy.conf but could not be decoded: write the key's bytes to a file and set "+to, true)
		c.problem(to, "tokenSecretKey could not be read: write the key's bytes to a file and set "+to)
		return
	}
	if c.opts.WriteDir == "" {
		fix := "run convert-config with -o FILE to have it written beside FILE, or write the key's bytes to a file (the base64 after data:;base64, through `base64 -d`) and set " + to
		c.dropped(key, "the key is inline in proxy.conf: "+fix, true)
		c.problem(to, "the token secret key is inline in proxy.conf: "+fix)
		return
	}
	path, err := c.writeFile("token-secret.key", b, 0o600)
	if err != nil {
		c.dropped(key, fmt.Sprintf("the inline key could not be written to a file: %v", err), true)
		c.problem(to, fmt.Sprintf("the token secret key could not be written to a file: %v", err))
		return
	}
	c.put(to, path, "tokenSecretKey (inline, written to a file by convert-config)")
	c.mapped(key, to, fmt.Sprintf("the key was inline in proxy.conf: its bytes written to %s (mode 0600), which the config names; keep it as secret as proxy.conf and ship it with config.yaml (a Secret)", path), true)
}

// writeFile writes a file convert-config made (a converted key) into opts.WriteDir and returns
// its absolute path. A file already there with the same content is kept (converting again is
// harmless); one with other content is not overwritten.
func (c *converter) writeFile(name string, content []byte, perm fs.FileMode) (string, error) {
	dir, err := filepath.Abs(c.opts.WriteDir)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if old, err := os.ReadFile(path); err == nil {
		if !bytes.Equal(old, content) {
			return "", fmt.Errorf("%s exists and holds something else: not overwritten (move it away and convert again)", path)
		}
	} else if err := os.WriteFile(path, content, perm); err != nil {
		return "", err
	}
	c.written = append(c.written, path)
	return path, nil
}
