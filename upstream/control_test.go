package upstream

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/fakebroker"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// recordingBroker records every CONNECT and AUTH_RESPONSE it receives, challenges each
// connection once right after CONNECTED, and answers LOOKUPs with Connect.
type recordingBroker struct {
	*fakebroker.Broker
	addr string
	mu   sync.Mutex
	conn []*pb.CommandConnect
	auth []*pb.CommandAuthResponse
}

func newRecordingBroker(t *testing.T) *recordingBroker {
	b := &recordingBroker{}
	b.Broker = fakebroker.Start(t, b.handle)
	b.addr = b.Addr
	return b
}

func (b *recordingBroker) handle(c net.Conn, cmd *pb.BaseCommand) {
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		b.mu.Lock()
		b.conn = append(b.conn, cmd.GetConnect())
		b.mu.Unlock()
		frame.WriteCommand(c, frame.Connected("fake", 21, 5<<20))
		frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
			Challenge: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte("PulsarAuthRefresh")}}})
	case pb.BaseCommand_AUTH_RESPONSE:
		b.mu.Lock()
		b.auth = append(b.auth, cmd.GetAuthResponse())
		b.mu.Unlock()
	case pb.BaseCommand_PING:
		frame.WriteCommand(c, frame.Pong())
	case pb.BaseCommand_LOOKUP:
		frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: cmd.GetLookupTopic().RequestId, Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://" + b.addr)}})
	}
}

func (b *recordingBroker) principals() (connects []string, authResponses int, open int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conn {
		connects = append(connects, c.GetAuthMethodName()+":"+string(c.GetAuthData())+"/"+c.GetOriginalPrincipal())
	}
	for _, a := range b.auth {
		if a.GetResponse().GetAuthMethodName() == "token" && string(a.GetResponse().GetAuthData()) == "proxy-secret" {
			authResponses++
		}
	}
	return connects, authResponses, b.Open()
}

func TestPoolAuthenticatesAndLooksUpPerPrincipal(t *testing.T) {
	b := newRecordingBroker(t)
	c := testConnector()
	c.Credentials = func() (string, []byte, error) { return "token", []byte("proxy-secret"), nil }
	c.OwnPrincipal = "proxy-health"
	control := NewControl(ControlConfig{Connector: c, MaxPending: 10, Logger: zerolog.Nop(), MaxPrincipals: 2})
	defer control.Close()
	lookupAs := func(principal string) {
		t.Helper()
		resp, err := control.RoundTrip(context.Background(), b.addr, Client{Principal: principal}, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String("t"), RequestId: proto.Uint64(1)}})
		if err != nil || resp.GetLookupTopicResponse().GetResponse() != pb.CommandLookupTopicResponse_Connect {
			t.Fatalf("lookup as %q: %v %v", principal, resp, err)
		}
	}
	lookupAs("alice")
	lookupAs("alice") // reuses alice's connection
	lookupAs("bob")
	if err := control.Ping(context.Background(), b.addr, Client{}); err != nil {
		t.Fatal(err)
	}
	connects, _, _ := b.principals()
	want := []string{"token:proxy-secret/alice", "token:proxy-secret/bob", "token:proxy-secret/proxy-health"}
	if len(connects) != len(want) {
		t.Fatalf("connects %v, want %v", connects, want)
	}
	for i := range want {
		if connects[i] != want[i] {
			t.Fatalf("connects %v, want %v", connects, want)
		}
	}
	// A third principal with MaxPrincipals=2 evicts the least recently used (alice).
	lookupAs("carol")
	// 4 connections made, one closed by eviction; each answered its challenge with the proxy's
	// own credentials.
	if !wait.Within(5*time.Second, func() bool {
		connects, answers, open := b.principals()
		return len(connects) == 4 && open == 3 && answers == 4
	}) {
		connects, answers, open := b.principals()
		t.Fatalf("connects %v, challenge answers %d, open %d", connects, answers, open)
	}
}

func TestPoolForwardsClientCredentialsUntilTheyExpire(t *testing.T) {
	b := newRecordingBroker(t)
	c := testConnector()
	c.Credentials = func() (string, []byte, error) { return "token", []byte("proxy-secret"), nil }
	control := NewControl(ControlConfig{Connector: c, MaxPending: 10, Logger: zerolog.Nop()})
	defer control.Close()
	lookupWith := func(tok string, expires time.Time) {
		t.Helper()
		client := Client{Principal: "alice", AuthMethod: "token", AuthData: []byte(tok), Expires: expires}
		if _, err := control.RoundTrip(context.Background(), b.addr, client, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String("t"), RequestId: proto.Uint64(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	lookupWith("alice-1", time.Now().Add(300*time.Millisecond))
	lookupWith("alice-1", time.Now().Add(300*time.Millisecond)) // same credentials, same connection
	if !wait.Within(5*time.Second, func() bool {
		_, _, open := b.principals()
		return open == 0 // retired at expiry
	}) {
		t.Fatal("connection with expired client credentials still open")
	}
	lookupWith("alice-2", time.Time{})
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.conn) != 2 || b.conn[0].GetOriginalAuthData() != "alice-1" || b.conn[1].GetOriginalAuthData() != "alice-2" ||
		b.conn[1].GetOriginalPrincipal() != "alice" || b.conn[1].GetOriginalAuthMethod() != "token" {
		t.Fatalf("connects: %v", b.conn)
	}
}

// A broker that refuses the proxy's own CONNECT still answers: Ping counts it as up. One
// that does not answer at all is down.
func TestPingCountsARefusingBrokerAsUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := frame.NewReader(c, 0).ReadFrame(); err == nil {
					frame.WriteCommand(c, frame.Error(0, pb.ServerError_AuthenticationError, "Failed to authenticate"))
				}
			}()
		}
	}()
	control := NewControl(ControlConfig{Connector: testConnector(), MaxPending: 10, Logger: zerolog.Nop()})
	defer control.Close()
	refusing := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := control.Ping(ctx, refusing, Client{}); err != nil {
		t.Fatalf("a broker answering CONNECT with an error: %v, want up", err)
	}
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadBroker := dead.Addr().String()
	dead.Close()
	if err := control.Ping(ctx, deadBroker, Client{}); err == nil {
		t.Fatal("a closed port counted as up")
	}
}

func testConnector() *Connector {
	return &Connector{Dialer: &Dialer{Timeout: time.Second}, Version: "test", ProtocolVersion: 21,
		Timeout: time.Second, MaxFrameSize: frame.DefaultMaxFrameSize}
}
