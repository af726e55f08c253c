package authn

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"
)

func certWith(cn string, dns []string, uris ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			panic(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

func TestTLSProviderRoleFrom(t *testing.T) {
	const spiffe = "spiffe://cluster.local/ns/app/sa/"
	cases := []struct {
		name, from, prefix string
		cert               *x509.Certificate
		role               string // "" = refused with ReasonNoRole
		detail             string // part of the refusal's message
	}{
		{"cn", "cn", "", certWith("alice", []string{"bob.example"}), "alice", ""},
		{"cn is the default", "", "", certWith("alice", nil), "alice", ""},
		{"cn missing", "cn", "", certWith("", []string{"alice.example"}), "", "no subject common name"},

		{"san-dns", "san-dns", "", certWith("ignored", []string{"alice.svc"}), "alice.svc", ""},
		{"san-dns missing", "san-dns", "", certWith("alice", nil), "", "no DNS subject alternative name"},
		{"san-dns ambiguous", "san-dns", "", certWith("", []string{"a.svc", "b.svc"}), "", "2 DNS subject alternative names"},

		{"san-uri whole", "san-uri", "", certWith("", nil, "spiffe://cluster.local/ns/app/sa/alice"), "spiffe://cluster.local/ns/app/sa/alice", ""},
		{"san-uri prefix stripped", "san-uri", spiffe, certWith("cn", nil, spiffe+"alice"), "alice", ""},
		{"san-uri other URIs ignored", "san-uri", spiffe, certWith("", nil, "https://example.com/x", spiffe+"alice"), "alice", ""},
		{"san-uri missing", "san-uri", "", certWith("alice", []string{"alice.svc"}), "", "no URI subject alternative name"},
		{"san-uri wrong prefix", "san-uri", spiffe, certWith("alice", nil, "spiffe://other.domain/ns/app/sa/alice"), "", "no URI subject alternative name starting with " + spiffe},
		{"san-uri nothing after prefix", "san-uri", spiffe, certWith("", nil, spiffe), "", "names no role after the prefix"},
		{"san-uri ambiguous", "san-uri", spiffe, certWith("", nil, spiffe+"alice", spiffe+"bob"), "", "2 of URI subject alternative name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			roleOf, err := CertificateRole(tc.from, tc.prefix)
			if err != nil {
				t.Fatal(err)
			}
			auth := NewAuthenticator("", TLSProvider{Role: roleOf})
			id, err := auth.Authenticate(Credentials{Method: "tls", PeerCertificates: []*x509.Certificate{tc.cert}})
			if tc.role != "" {
				if err != nil || id.Role != tc.role || id.Method != "tls" {
					t.Fatalf("got %+v, %v; want role %q", id, err, tc.role)
				}
				return
			}
			if ReasonOf(err) != ReasonNoRole || !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("got %+v, %v; want a no_role refusal saying %q", id, err, tc.detail)
			}
			if !strings.HasPrefix(err.Error(), "authentication failed (tls): no_role: ") {
				t.Fatalf("message %q is not in the usual form", err)
			}
		})
	}
}

func TestCertificateRoleRefusesUnknownSource(t *testing.T) {
	if _, err := CertificateRole("email", ""); err == nil || !strings.Contains(err.Error(), "san-uri") {
		t.Fatalf("err = %v", err)
	}
}
