// Package certs makes certificates for tests: a CA, server certificates for loopback
// (or for given hosts) and client certificates, written as PEM files.
//
// The Make functions return their errors. The others take a test (a TB: *testing.T and
// *testing.B are ones) and fail it instead; the package does not import testing, so the
// product never links it.
package certs

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
	"time"
)

// TB is the part of testing.TB these helpers use to fail a test.
type TB interface {
	Helper()
	Fatal(args ...any)
}

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
func NewCA(t TB, dir, name string) *CA {
	t.Helper()
	ca, err := MakeCA(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// MakeCA is NewCA returning its error.
func MakeCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, key: key, dir: dir, serial: 1, CertFile: filepath.Join(dir, name+"-ca.pem")}
	return ca, writePEM(ca.CertFile, "CERTIFICATE", der)
}

// Pair is a certificate and key on disk.
type Pair struct {
	Cert     *x509.Certificate
	CertFile string
	KeyFile  string
}

// loopback are the names of a server certificate issued without hosts.
var loopback = []string{"127.0.0.1", "::1", "localhost"}

// Server issues a certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t TB, name string, notAfter time.Time) Pair {
	t.Helper()
	return must(t)(ca.MakeServer(name, notAfter))
}

// ServerFor issues a server certificate naming only hosts (IP literals or DNS names).
func (ca *CA) ServerFor(t TB, name string, notAfter time.Time, hosts ...string) Pair {
	t.Helper()
	return must(t)(ca.MakeServer(name, notAfter, hosts...))
}

// MakeServer issues a server certificate for hosts (IP literals or DNS names); with none,
// for loopback.
func (ca *CA) MakeServer(name string, notAfter time.Time, hosts ...string) (Pair, error) {
	if len(hosts) == 0 {
		hosts = loopback
	}
	tmpl := ca.template(name, notAfter, x509.ExtKeyUsageServerAuth)
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.sign(name, tmpl)
}

// Client issues a client certificate whose subject CN is cn.
func (ca *CA) Client(t TB, cn string) Pair {
	t.Helper()
	return must(t)(ca.MakeClient(cn))
}

// MakeClient is Client returning its error.
func (ca *CA) MakeClient(cn string) (Pair, error) {
	return ca.sign(cn, ca.template(cn, time.Now().Add(23*time.Hour), x509.ExtKeyUsageClientAuth))
}

// ClientSpec describes a client certificate with subject alternative names.
type ClientSpec struct {
	Name       string // file name stem; must be unique within the CA's directory
	CommonName string // "" = no subject CN
	DNSNames   []string
	URIs       []string // e.g. spiffe://cluster.local/ns/app/sa/alice
}

// ClientWith issues a client certificate as spec describes.
func (ca *CA) ClientWith(t TB, spec ClientSpec) Pair {
	t.Helper()
	return must(t)(ca.MakeClientWith(spec))
}

// MakeClientWith is ClientWith returning its error.
func (ca *CA) MakeClientWith(spec ClientSpec) (Pair, error) {
	tmpl := ca.template(spec.CommonName, time.Now().Add(23*time.Hour), x509.ExtKeyUsageClientAuth)
	tmpl.DNSNames = spec.DNSNames
	for _, s := range spec.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return Pair{}, err
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return ca.sign(spec.Name, tmpl)
}

func (ca *CA) template(cn string, notAfter time.Time, usage x509.ExtKeyUsage) *x509.Certificate {
	ca.serial++
	return &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
}

// sign issues tmpl with a new key and writes both to name.pem and name-key.pem.
func (ca *CA) sign(name string, tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, err
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	p := Pair{Cert: cert, CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	if err := writePEM(p.CertFile, "CERTIFICATE", der); err != nil {
		return Pair{}, err
	}
	return p, writePEM(p.KeyFile, "PRIVATE KEY", keyDER)
}

func must(t TB) func(Pair, error) Pair {
	return func(p Pair, err error) Pair {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
