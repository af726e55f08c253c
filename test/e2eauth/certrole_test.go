package e2eauth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

const spiffePrefix = "spiffe://cluster.local/ns/app/sa/"

// mtls is a proxy whose TLS listener requires a client certificate of its CA.
type mtls struct {
	*proxy
	ca *certs.CA
}

// startMTLSProxy runs the proxy in front of r with the tls auth method naming roles as
// roleFrom (and uriPrefix) say, and a policy that allows everyone: what a client may do is
// the brokers' decision alone.
func startMTLSProxy(t *testing.T, r *rig.Rig, roleFrom, uriPrefix string) mtls {
	t.Helper()
	ca := certs.NewCA(t, t.TempDir(), "clients")
	server := ca.Server(t, "proxy", time.Now().Add(24*time.Hour))
	yaml := fmt.Sprintf("  tls:\n    roleFrom: %s\n    uriPrefix: %q\n", roleFrom, uriPrefix) +
		fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n  clientCAFile: %q\n  clientAuth: require\n",
			server.CertFile, server.KeyFile, ca.CertFile)
	p := startProxyOn(t, r, allowAll, yaml)
	if p.PulsarTLSURL == "" {
		t.Fatal("no TLS listener started")
	}
	return mtls{proxy: p, ca: ca}
}

// certClient is a pulsar+ssl:// client of the proxy that authenticates with cert (method tls).
func (m mtls) certClient(t *testing.T, cert certs.Pair, opTimeout time.Duration) pulsar.Client {
	t.Helper()
	return clientWith(t, pulsar.ClientOptions{URL: m.PulsarTLSURL, TLSTrustCertsFilePath: m.ca.CertFile, TLSValidateHostname: true,
		Authentication: pulsar.NewAuthenticationTLS(cert.CertFile, cert.KeyFile)}, opTimeout)
}

// assertBrokerAuthorizesCertRoles mirrors TestBrokerAuthorizesOriginalPrincipal with roles
// taken from client certificates: alice's certificate produces and consumes on nsAliceOnly,
// bob's is refused there by the broker (the proxy allows everyone and denies nothing), so
// the broker authorized the certificate's role, sent as original_principal.
func assertBrokerAuthorizesCertRoles(t *testing.T, m mtls, alice, bob certs.Pair) {
	t.Helper()
	topic := uniqueTopic(nsAliceOnly, "cert")
	produceConsume(t, m.certClient(t, alice, 20*time.Second), topic, 10)

	_, err := m.certClient(t, bob, 20*time.Second).CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "Authorization") {
		t.Fatalf("bob's producer: err = %v, want the broker's authorization refusal", err)
	}
	t.Logf("bob refused: %v", err)
	if got := m.count(t, "pulsar_proxy_authorization_denials_total"); got != 0 {
		t.Fatalf("the proxy denied %v commands; the refusal must be the broker's", got)
	}
	if got := m.count(t, "pulsar_proxy_authentication_failures_total"); got != 0 {
		t.Fatalf("%v authentication failures at the proxy", got)
	}
}

// The role is the certificate's subject CN (auth.tls.roleFrom cn, the default).
func TestBrokerAuthorizesCertificateCN(t *testing.T) {
	m := startMTLSProxy(t, trustingRig(t), "cn", "")
	assertBrokerAuthorizesCertRoles(t, m, m.ca.Client(t, "alice"), m.ca.Client(t, "bob"))

	// A client certificate of another CA fails the handshake (clientAuth require), which is
	// counted.
	t.Run("untrusted certificate", func(t *testing.T) {
		other := certs.NewCA(t, t.TempDir(), "other")
		before := m.count(t, "pulsar_proxy_tls_handshakes_total", `result="error"`)
		mallory := m.certClient(t, other.Client(t, "alice"), 3*time.Second)
		if _, err := mallory.CreateProducer(pulsar.ProducerOptions{Topic: uniqueTopic(nsShared, "x")}); err == nil {
			t.Fatal("a client with an untrusted certificate created a producer")
		}
		if got := m.metric(t, "pulsar_proxy_tls_handshakes_total", `result="error"`); got <= before {
			t.Fatalf("handshake errors %v before, %v after", before, got)
		}
	})
}

// The role is the URI SAN after the SPIFFE prefix (auth.tls.roleFrom san-uri). Each
// certificate's CN names the other role, so a role taken from the CN would fail both ways.
func TestBrokerAuthorizesCertificateSANURI(t *testing.T) {
	m := startMTLSProxy(t, trustingRig(t), "san-uri", spiffePrefix)
	alice := m.ca.ClientWith(t, certs.ClientSpec{Name: "alice", CommonName: "bob", URIs: []string{spiffePrefix + "alice"}})
	bob := m.ca.ClientWith(t, certs.ClientSpec{Name: "bob", CommonName: "alice", URIs: []string{spiffePrefix + "bob"}})
	assertBrokerAuthorizesCertRoles(t, m, alice, bob)

	// A certificate without a URI SAN under the prefix is refused at CONNECT, saying why.
	t.Run("no URI SAN", func(t *testing.T) {
		cnOnly := m.ca.ClientWith(t, certs.ClientSpec{Name: "cn-only", CommonName: "alice",
			URIs: []string{"spiffe://other.domain/ns/app/sa/alice"}})
		_, err := m.certClient(t, cnOnly, 3*time.Second).CreateProducer(pulsar.ProducerOptions{Topic: uniqueTopic(nsShared, "x")})
		if err == nil {
			t.Fatal("a certificate without a role created a producer")
		}
		if got := m.metric(t, "pulsar_proxy_authentication_failures_total", `method="tls"`, `reason="no_role"`); got < 1 {
			t.Fatalf("failures{tls,no_role} = %v (client error: %v)", got, err)
		}
		if !strings.Contains(m.LogTail(200), "no URI subject alternative name starting with "+spiffePrefix) {
			t.Fatalf("the refusal's reason is not in the proxy log:\n%s", m.LogTail(30))
		}
	})
}

// Brokers that authenticate forwarded credentials themselves (the auth rig:
// authenticateOriginalAuthData=true) refuse a certificate-authenticated client: they have
// no provider for its method and nothing they could check. This is Pulsar's rule, not the
// proxy's; the trusting rig above is the setup that works. The proxy accepts alice's
// certificate (CONNECTED); her lookup fails at the brokers' CONNECT.
func TestVerifyingBrokersRefuseCertificateRoles(t *testing.T) {
	m := startMTLSProxy(t, theRig, "cn", "")
	alice := m.ca.Client(t, "alice")
	pair, err := tls.LoadX509KeyPair(alice.CertFile, alice.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(m.ca.Cert)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", m.TLSAddr,
		&tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	write := func(cmd *pb.BaseCommand) {
		if err := frame.WriteCommand(c, cmd); err != nil {
			t.Fatal(err)
		}
	}
	write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("e2eauth"), ProtocolVersion: proto.Int32(21), AuthMethodName: proto.String("tls")}})
	if resp := readCmd(t, r); resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT with alice's certificate: %v", resp)
	}
	write(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		RequestId: proto.Uint64(1), Topic: proto.String(uniqueTopic(nsAliceOnly, "verifying"))}})
	resp := readCmd(t, r).GetLookupTopicResponse()
	if resp.GetResponse() != pb.CommandLookupTopicResponse_Failed || !strings.Contains(resp.GetMessage(), "Failed to authenticate") {
		t.Fatalf("alice's lookup: %v, want the brokers' authentication refusal", resp)
	}
	t.Logf("alice's lookup refused: %s", resp.GetMessage())
}
