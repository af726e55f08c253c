// Package testcerts makes certificates for tests: a CA, server certificates for loopback
// and client certificates, written as PEM files.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA signs certificates.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertFile is the CA certificate as PEM.
	CertFile string
	dir      string
	serial   int64
}

// NewCA makes a CA whose files live in dir.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, key: key, dir: dir, serial: 1, CertFile: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Pair is a certificate and key on disk.
type Pair struct {
	Cert     *x509.Certificate
	CertFile string
	KeyFile  string
}

// Server issues a certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB, name string, notAfter time.Time) Pair {
	return ca.issue(t, name, notAfter, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate whose subject CN is cn.
func (ca *CA) Client(t testing.TB, cn string) Pair {
	return ca.issue(t, cn, time.Now().Add(24*time.Hour), x509.ExtKeyUsageClientAuth)
}

// ClientSpec describes a client certificate with subject alternative names.
type ClientSpec struct {
	Name       string // file name stem; must be unique within the CA's directory
	CommonName string // "" = no subject CN
	DNSNames   []string
	URIs       []string // e.g. spiffe://cluster.local/ns/app/sa/alice
}

// ClientWith issues a client certificate as spec describes.
func (ca *CA) ClientWith(t testing.TB, spec ClientSpec) Pair {
	t.Helper()
	tmpl := ca.template(spec.CommonName, time.Now().Add(24*time.Hour), x509.ExtKeyUsageClientAuth)
	tmpl.DNSNames = spec.DNSNames
	for _, s := range spec.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return ca.sign(t, spec.Name, tmpl)
}

func (ca *CA) issue(t testing.TB, cn string, notAfter time.Time, usage x509.ExtKeyUsage) Pair {
	t.Helper()
	tmpl := ca.template(cn, notAfter, usage)
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	return ca.sign(t, cn, tmpl)
}

func (ca *CA) template(cn string, notAfter time.Time, usage x509.ExtKeyUsage) *x509.Certificate {
	ca.serial++
	return &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
}

// sign signs tmpl with a fresh key and writes name.pem and name-key.pem.
func (ca *CA) sign(t testing.TB, name string, tmpl *x509.Certificate) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{Cert: cert, CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	writePEM(t, p.KeyFile, "PRIVATE KEY", keyDER)
	return p
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
