package authn

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// Where a client certificate's role comes from (config auth.tls.roleFrom).
const (
	sourceCN     = "cn"      // the subject common name
	sourceSANDNS = "san-dns" // the one DNS subject alternative name
	sourceSANURI = "san-uri" // the one URI SAN, e.g. a SPIFFE ID
)

// CertificateRole returns the function that names a certificate's role as from says.
// uriPrefix applies to san-uri only: a URI SAN must start with it, and the rest is the role.
func CertificateRole(from, uriPrefix string) (CertificateRoleFunc, error) {
	switch from {
	case sourceCN, "":
		return roleFromCN, nil
	case sourceSANDNS:
		return roleFromDNSName, nil
	case sourceSANURI:
		return func(c *x509.Certificate) (string, error) { return roleFromURI(c, uriPrefix) }, nil
	}
	return nil, fmt.Errorf("unknown certificate role source %q (want %s, %s or %s)", from, sourceCN, sourceSANDNS, sourceSANURI)
}

func roleFromCN(c *x509.Certificate) (string, error) {
	if c.Subject.CommonName == "" {
		return "", fmt.Errorf("client certificate has no subject common name (CN) to take the role from")
	}
	return c.Subject.CommonName, nil
}

// roleFromDNSName refuses several names rather than guess which one is the role.
func roleFromDNSName(c *x509.Certificate) (string, error) {
	switch len(c.DNSNames) {
	case 0:
		return "", fmt.Errorf("client certificate has no DNS subject alternative name to take the role from")
	case 1:
		return c.DNSNames[0], nil
	}
	return "", fmt.Errorf("client certificate has %d DNS subject alternative names; the role must be exactly one", len(c.DNSNames))
}

// roleFromURI takes the one URI SAN that starts with prefix, minus the prefix. URIs with
// another prefix are ignored (a certificate may carry unrelated ones), but two that match
// are refused rather than guessed between.
func roleFromURI(c *x509.Certificate, prefix string) (string, error) {
	var roles []string
	for _, u := range c.URIs {
		if s := u.String(); strings.HasPrefix(s, prefix) {
			roles = append(roles, strings.TrimPrefix(s, prefix))
		}
	}
	what := "URI subject alternative name"
	if prefix != "" {
		what += " starting with " + prefix
	}
	switch {
	case len(roles) == 0:
		return "", fmt.Errorf("client certificate has no %s to take the role from", what)
	case len(roles) > 1:
		return "", fmt.Errorf("client certificate has %d of %s; the role must be exactly one", len(roles), what)
	case roles[0] == "":
		return "", fmt.Errorf("client certificate's %s names no role after the prefix", what)
	}
	return roles[0], nil
}
