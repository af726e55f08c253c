package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// rootsChildEnv makes this test binary verify the public chain and exit (see TestMain), so
// that the verification runs in a process whose environment hides the system's roots.
const rootsChildEnv = "PULSAR_PROXY_TEST_VERIFY_PUBLIC_CHAIN"

func TestMain(m *testing.M) {
	if os.Getenv(rootsChildEnv) == "1" {
		if err := verifyPublicChain("testdata/public-chain.pem"); err != nil {
			fmt.Println("verify:", err)
			os.Exit(1)
		}
		fmt.Println("verified")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPublicRootsWithoutSystemRoots: with no system roots at all (SSL_CERT_FILE and
// SSL_CERT_DIR naming nothing, as in the FROM-scratch image), the binary still verifies a
// server certificate issued under a public root. The chain is a real one (www.google.com,
// valid in March 2023, issued by GTS CA 1C3 under GTS Root R1, as Google Trust Services
// published it); the root itself is not in testdata, so only roots built into the binary can
// complete it. The test binary links what the proxy's binary links (this package's imports).
func TestPublicRootsWithoutSystemRoots(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe)
	c.Env = append(os.Environ(), rootsChildEnv+"=1", "SSL_CERT_FILE=/nonexistent/ca.pem", "SSL_CERT_DIR=/nonexistent")
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "verified" {
		t.Fatalf("without system roots, the public chain does not verify: %v\n%s", err, out)
	}
}

// verifyPublicChain verifies the leaf (the first certificate of file) for its name at a time
// it was valid, with the file's other certificates as intermediates and the default roots.
func verifyPublicChain(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var certs []*x509.Certificate
	for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return err
		}
		certs = append(certs, c)
	}
	if len(certs) < 2 {
		return fmt.Errorf("%s: %d certificates, want a leaf and its intermediate", file, len(certs))
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err = certs[0].Verify(x509.VerifyOptions{
		DNSName:       "www.google.com",
		Intermediates: inter,
		CurrentTime:   time.Date(2023, 3, 1, 0, 0, 0, 0, time.UTC),
	})
	return err
}
