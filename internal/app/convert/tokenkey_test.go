package convert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

const tokenProvider = "authenticationEnabled=true\n" +
	"authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n" +
	"brokerServiceURL=pulsar://broker-0:6650\n"

// checkConfig runs check-config's own checks on the written file, as `pulsar-proxy
// check-config FILE` does, and returns its report.
func checkConfig(t *testing.T, path string) (*checkconfig.Report, string) {
	t.Helper()
	r := checkconfig.Check(path, nil, time.Now())
	var b bytes.Buffer
	r.Write(&b)
	return r, b.String()
}

// TestDERTokenPublicKey: Pulsar's `tokens create-key-pair` writes the public key as DER, and
// proxy.conf names it (file:///…, a path, or inline data:;base64,…). pulsar-proxy reads PEM.
// With -o FILE the key is written as PEM beside FILE, the config names that file, the report
// says so, and check-config passes; without a place to write it the conversion is an error
// (exit 3) that names the fix, and never exit 0 on a file check-config refuses.
func TestDERTokenPublicKey(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pub  any
		priv any
		alg  jwt.SigningMethod
		// how proxy.conf names the key: file URL, plain path, base64 text in the file, inline
		form string
	}{
		{"RSA, file URL", &rsaKey.PublicKey, rsaKey, jwt.SigningMethodRS256, "file"},
		{"RSA, path", &rsaKey.PublicKey, rsaKey, jwt.SigningMethodRS256, "path"},
		{"EC, base64 text in the file", &ecKey.PublicKey, ecKey, jwt.SigningMethodES256, "base64"},
		{"RSA, inline data URL", &rsaKey.PublicKey, rsaKey, jwt.SigningMethodRS256, "data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			der, err := x509.MarshalPKIXPublicKey(c.pub)
			if err != nil {
				t.Fatal(err)
			}
			keys := t.TempDir()
			keyFile := filepath.Join(keys, "public.key")
			var setting string
			switch c.form {
			case "file":
				writeFile(t, keyFile, string(der))
				setting = "file://" + keyFile
			case "path":
				writeFile(t, keyFile, string(der))
				setting = keyFile
			case "base64":
				writeFile(t, keyFile, base64.StdEncoding.EncodeToString(der))
				setting = "file://" + keyFile
			case "data":
				setting = "data:;base64," + base64.StdEncoding.EncodeToString(der)
			}
			confPath := filepath.Join(keys, "proxy.conf")
			writeFile(t, confPath, tokenProvider+"tokenPublicKey="+setting+"\n")

			// With -o: converted beside the output, and check-config passes.
			outDir := t.TempDir()
			out := filepath.Join(outDir, "config.yaml")
			var stdout, stderr bytes.Buffer
			code := Main([]string{"-o", out, confPath}, nil, &stdout, &stderr)
			report := stderr.String()
			r, findings := checkConfig(t, out)
			if code != ExitOK || r.Failed() {
				t.Fatalf("exit %d, check-config failed %v:\n%s\n%s", code, r.Failed(), report, findings)
			}
			pemFile := r.Config.Auth.Token.PublicKeyFile
			if filepath.Dir(pemFile) != outDir || !strings.Contains(report, pemFile) {
				t.Errorf("auth.token.publicKeyFile %q: want a PEM file beside %s, named in the report:\n%s", pemFile, out, report)
			}
			b, err := os.ReadFile(pemFile)
			if err != nil {
				t.Fatal(err)
			}
			if block, _ := pem.Decode(b); block == nil || block.Type != "PUBLIC KEY" || !bytes.Equal(block.Bytes, der) {
				t.Errorf("%s does not hold the key as PEM:\n%s", pemFile, b)
			}
			// The proxy verifies a token signed with the private key against the written file.
			tok, err := jwt.NewWithClaims(c.alg, jwt.MapClaims{"sub": "app"}).SignedString(c.priv)
			if err != nil {
				t.Fatal(err)
			}
			key, err := authn.ReadPublicKey(pemFile)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return key, nil }); err != nil {
				t.Errorf("a token signed with the key pair does not verify against %s: %v", pemFile, err)
			}
			// Converting again finds the same file and keeps it.
			if code := Main([]string{"-o", out, confPath}, nil, &stdout, &stderr); code != ExitOK {
				t.Errorf("a second conversion: exit %d\n%s", code, stderr.String())
			}

			// To standard output there is nowhere to write the PEM: an error naming the fix.
			stdout.Reset()
			stderr.Reset()
			code = Main([]string{confPath}, nil, &stdout, &stderr)
			if code != ExitNeedsInput {
				t.Errorf("to standard output: exit %d, want %d (the key must be converted)\n%s", code, ExitNeedsInput, stderr.String())
			}
			for _, fix := range []string{"-o FILE", "openssl pkey -pubin -inform DER"} {
				if !strings.Contains(stderr.String(), fix) {
					t.Errorf("the report does not name the fix %q:\n%s", fix, stderr.String())
				}
			}
		})
	}
}

// TestPEMTokenPublicKey: a key that is PEM already is used where it is, nothing written.
func TestPEMTokenPublicKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "public.pem")
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
	confPath := filepath.Join(dir, "proxy.conf")
	writeFile(t, confPath, tokenProvider+"tokenPublicKey=file://"+keyFile+"\n")
	outDir := t.TempDir()
	out := filepath.Join(outDir, "config.yaml")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"-o", out, confPath}, nil, &stdout, &stderr); code != ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	cfg, err := config.Load(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.Token.PublicKeyFile != keyFile {
		t.Errorf("auth.token.publicKeyFile %q, want %q", cfg.Auth.Token.PublicKeyFile, keyFile)
	}
	if entries, _ := os.ReadDir(outDir); len(entries) != 1 {
		t.Errorf("files written beside config.yaml: %v", entries)
	}
	if r, findings := checkConfig(t, out); r.Failed() {
		t.Errorf("check-config:\n%s", findings)
	}
}

// TestConvertedFileThatCheckConfigRefuses: whatever check-config refuses (here a client
// certificate file that does not exist where the conversion runs) is an error of the
// conversion, with check-config's words, never exit 0.
func TestConvertedFileThatCheckConfigRefuses(t *testing.T) {
	dir := t.TempDir()
	confPath := filepath.Join(dir, "proxy.conf")
	missing := filepath.Join(dir, "missing.pem")
	writeFile(t, confPath, "brokerServiceURL=pulsar://broker-0:6650\nservicePortTls=6651\n"+
		"tlsCertificateFilePath="+missing+"\ntlsKeyFilePath="+missing+"\n")
	out := filepath.Join(dir, "config.yaml")
	var stdout, stderr bytes.Buffer
	code := Main([]string{"-o", out, confPath}, nil, &stdout, &stderr)
	r, findings := checkConfig(t, out)
	if !r.Failed() {
		t.Fatalf("check-config passes the file:\n%s", findings)
	}
	if code != ExitNeedsInput || !strings.Contains(stderr.String(), missing) {
		t.Errorf("exit %d, want %d naming %s:\n%s", code, ExitNeedsInput, missing, stderr.String())
	}
}

// TestSecretKeyFiles: Pulsar takes a tokenSecretKey file's bytes as the key, and so does
// pulsar-proxy: a key file is named as it is, whatever it holds (base64 text is the key, not
// what it decodes to), with nothing written beside -o FILE. An inline key (data:;base64,…) is
// decoded by Pulsar: its bytes are written to a file beside -o FILE; without -o that is an
// error naming the fix.
func TestSecretKeyFiles(t *testing.T) {
	random := make([]byte, 32)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	text := base64.StdEncoding.EncodeToString(random)
	for _, c := range []struct {
		name, setting string
		pulsarKey     []byte // what Pulsar signs and verifies with
		written       bool   // a key file written beside -o FILE
	}{
		{"a file of base64 text", "file://${dir}/secret.key", []byte(text), false},
		{"a file of raw bytes", "file://${dir}/secret.raw", random, false},
		{"a path", "${dir}/secret.raw", random, false},
		{"inline", "data:;base64," + text, random, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "secret.key"), text)
			writeFile(t, filepath.Join(dir, "secret.raw"), string(random))
			confPath := filepath.Join(dir, "proxy.conf")
			writeFile(t, confPath, tokenProvider+"tokenSecretKey="+strings.ReplaceAll(c.setting, "${dir}", dir)+"\n")
			outDir := t.TempDir()
			out := filepath.Join(outDir, "config.yaml")
			var stdout, stderr bytes.Buffer
			code := Main([]string{"-o", out, confPath}, nil, &stdout, &stderr)
			r, findings := checkConfig(t, out)
			if code != ExitOK || r.Failed() {
				t.Fatalf("exit %d, check-config:\n%s\n%s", code, stderr.String(), findings)
			}
			keyFile := r.Config.Auth.Token.SecretKeyFile
			if written := filepath.Dir(keyFile) == outDir; written != c.written {
				t.Errorf("auth.token.secretKeyFile %q: written beside %s %v, want %v:\n%s", keyFile, out, written, c.written, stderr.String())
			}
			if fi, err := os.Stat(keyFile); c.written && (err != nil || fi.Mode().Perm() != 0o600) {
				t.Errorf("%s: %v, mode %v, want 0600", keyFile, err, fi.Mode())
			}
			key, err := authn.ReadSecretKey(keyFile)
			if err != nil || !bytes.Equal(key, c.pulsarKey) {
				t.Errorf("pulsar-proxy reads the key as %q (%v), Pulsar as %q", key, err, c.pulsarKey)
			}

			stderr.Reset()
			code = Main([]string{confPath}, nil, &stdout, &stderr)
			if c.written && (code != ExitNeedsInput || !strings.Contains(stderr.String(), "-o FILE")) {
				t.Errorf("to standard output: exit %d, want %d naming -o FILE:\n%s", code, ExitNeedsInput, stderr.String())
			}
			if !c.written && code != ExitOK {
				t.Errorf("to standard output: exit %d, want 0:\n%s", code, stderr.String())
			}
		})
	}
}
