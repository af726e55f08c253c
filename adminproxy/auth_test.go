package adminproxy

import (
	"crypto/tls"
	"crypto/x509"
	"net/http/httptest"
	"testing"
)

func TestCredentials(t *testing.T) {
	cert := &x509.Certificate{}
	verified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}
	unverified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	for _, tc := range []struct {
		name     string
		header   []string
		tls      *tls.ConnectionState
		method   string
		data     string
		withCert bool
	}{
		{"nothing", nil, nil, "", "", false},
		{"bearer", []string{"Authorization", "Bearer abc"}, nil, "token", "abc", false},
		{"bearer, any case", []string{"Authorization", "bearer  abc "}, nil, "token", "abc", false},
		{"Pulsar's method header", []string{"Authorization", "Bearer abc", headerAuthMethod, "token"}, verified, "token", "abc", false},
		{"certificate", nil, verified, "tls", "", true},
		{"certificate asked for by name", []string{"Authorization", "Bearer abc", headerAuthMethod, "tls"}, verified, "tls", "", true},
		{"unverified certificate", nil, unverified, "", "", false},
		{"bearer beats a certificate", []string{"Authorization", "Bearer abc"}, verified, "token", "abc", false},
		{"basic", []string{"Authorization", "Basic dTpw"}, nil, "basic", "u:p", false},
		{"basic, any case", []string{"Authorization", "BASIC dTpw"}, nil, "basic", "u:p", false},
		{"basic named by Pulsar's header", []string{"Authorization", "Basic dTpw", headerAuthMethod, "basic"}, verified, "basic", "u:p", false},
		{"basic, two spaces (Pulsar's split refuses it)", []string{"Authorization", "Basic  dTpw"}, nil, "basic", "", false},
		{"basic, not base64", []string{"Authorization", "Basic !!"}, nil, "basic", "", false},
		{"another method", []string{headerAuthMethod, "athenz"}, nil, "athenz", "", false},
	} {
		r := httptest.NewRequest("GET", "/admin/v2/tenants", nil)
		for i := 0; i+1 < len(tc.header); i += 2 {
			r.Header.Set(tc.header[i], tc.header[i+1])
		}
		r.TLS = tc.tls
		c := credentials(r)
		if c.Method != tc.method || string(c.Data) != tc.data || (c.PeerCertificates != nil) != tc.withCert {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

func TestStaticUpstreams(t *testing.T) {
	s, err := NewStaticUpstreams([]string{"http://W0:6750", "http://[::1]:6750/"})
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]int{}
	for range 4 {
		u := s.WebURLs()
		if len(u) != 2 {
			t.Fatalf("%q", u)
		}
		first[u[0]]++
	}
	if first["http://w0:6750"] != 2 || first["http://[::1]:6750"] != 2 {
		t.Errorf("round robin: %v", first)
	}
	for _, tc := range []struct {
		scheme, host, port string
		want               bool
	}{{"http", "w0", "6750", true}, {"HTTP", "W0", "6750", true}, {"http", "::1", "6750", true}, {"https", "w0", "6750", false}, {"http", "w1", "6750", false}, {"http", "w0", "6751", false}} {
		if got := s.AllowWeb(tc.scheme, tc.host, tc.port); got != tc.want {
			t.Errorf("AllowWeb(%s %s %s) = %v", tc.scheme, tc.host, tc.port, got)
		}
	}
	if _, err := NewStaticUpstreams([]string{"w0:6750"}); err == nil {
		t.Error("a URL without scheme accepted")
	}
}
