package upstream

import (
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The one broker CONNECT: what it says for a client session and for the proxy's own
// connections, with and without the proxy's credentials.
func TestConnectCommand(t *testing.T) {
	creds := func() (string, []byte, error) { return "token", []byte("proxy-token"), nil }
	hello := &Hello{ClientVersion: "Pulsar-Java-v4.0.8", ProtocolVersion: 20, FeatureFlags: &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)}}
	for _, tc := range []struct {
		name   string
		creds  func() (string, []byte, error)
		hello  *Hello
		client Client
		want   *pb.CommandConnect
	}{
		{"client session", creds, hello, Client{Principal: "alice"}, &pb.CommandConnect{
			ClientVersion: proto.String("Pulsar-Java-v4.0.8"), ProtocolVersion: proto.Int32(20), FeatureFlags: hello.FeatureFlags,
			ProxyVersion: proto.String("pulsar-proxy/t"), AuthMethodName: proto.String("token"), AuthData: []byte("proxy-token"),
			OriginalPrincipal: proto.String("alice")}},
		{"client credentials forwarded", creds, hello, Client{Principal: "alice", AuthMethod: "token", AuthData: []byte("alice-token")}, &pb.CommandConnect{
			ClientVersion: proto.String("Pulsar-Java-v4.0.8"), ProtocolVersion: proto.Int32(20), FeatureFlags: hello.FeatureFlags,
			ProxyVersion: proto.String("pulsar-proxy/t"), AuthMethodName: proto.String("token"), AuthData: []byte("proxy-token"),
			OriginalPrincipal: proto.String("alice"), OriginalAuthMethod: proto.String("token"), OriginalAuthData: proto.String("alice-token")}},
		{"client without a role, proxy with credentials", creds, hello, Client{}, &pb.CommandConnect{
			ClientVersion: proto.String("Pulsar-Java-v4.0.8"), ProtocolVersion: proto.Int32(20), FeatureFlags: hello.FeatureFlags,
			ProxyVersion: proto.String("pulsar-proxy/t"), AuthMethodName: proto.String("token"), AuthData: []byte("proxy-token"),
			OriginalPrincipal: proto.String("proxy-own")}},
		{"no authentication anywhere", nil, hello, Client{}, &pb.CommandConnect{
			ClientVersion: proto.String("Pulsar-Java-v4.0.8"), ProtocolVersion: proto.Int32(20), FeatureFlags: hello.FeatureFlags,
			ProxyVersion: proto.String("pulsar-proxy/t")}},
		{"the proxy's own connection", creds, nil, Client{}, &pb.CommandConnect{
			ClientVersion: proto.String("pulsar-proxy/t"), ProtocolVersion: proto.Int32(21), ProxyVersion: proto.String("pulsar-proxy/t"),
			AuthMethodName: proto.String("token"), AuthData: []byte("proxy-token"), OriginalPrincipal: proto.String("proxy-own")}},
		{"a lookup connection for a role", creds, nil, Client{Principal: "bob"}, &pb.CommandConnect{
			ClientVersion: proto.String("pulsar-proxy/t"), ProtocolVersion: proto.Int32(21), ProxyVersion: proto.String("pulsar-proxy/t"),
			AuthMethodName: proto.String("token"), AuthData: []byte("proxy-token"), OriginalPrincipal: proto.String("bob")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Connector{Version: "pulsar-proxy/t", ProtocolVersion: 21, Credentials: tc.creds, OwnPrincipal: "proxy-own"}
			cmd, err := c.connectCommand(tc.hello, tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(cmd.GetConnect(), tc.want) || cmd.GetType() != pb.BaseCommand_CONNECT {
				t.Fatalf("CONNECT\n got %v\nwant %v", cmd.GetConnect(), tc.want)
			}
		})
	}
}

// Both of the proxy's own kinds of broker connection answer a challenge with this one
// command: the proxy's credentials, read again, under its version.
func TestAuthResponse(t *testing.T) {
	n := 0
	c := &Connector{Version: "pulsar-proxy/t", Credentials: func() (string, []byte, error) {
		n++
		return "token", []byte("fresh-" + strconv.Itoa(n)), nil
	}}
	for i := 1; i <= 2; i++ {
		got, err := c.AuthResponse("b:6650")
		want := &pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{
			ClientVersion: proto.String("pulsar-proxy/t"),
			Response:      &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte("fresh-" + strconv.Itoa(i))}}}
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("AuthResponse %d: %v, %v; want %v", i, got, err, want)
		}
	}
	if _, err := (&Connector{}).AuthResponse("b:6650"); err == nil || !strings.Contains(err.Error(), "b:6650") {
		t.Fatalf("without credentials: %v, want an error naming the broker", err)
	}
}
