package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// lookupConn is a raw lookup-mode connection to the proxy.
type lookupConn struct {
	t    *testing.T
	conn net.Conn
	r    *frame.Reader
}

func dialLookup(t *testing.T, addr string) *lookupConn {
	t.Helper()
	resp, conn := rawConnect(t, addr, func(*pb.CommandConnect) {})
	if resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT answered with %v", resp)
	}
	if v := resp.GetConnected().GetServerVersion(); !strings.HasPrefix(v, "pulsar-proxy/") {
		t.Errorf("server_version %q does not name pulsar-proxy", v)
	}
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	return &lookupConn{t: t, conn: conn, r: frame.NewReader(conn, 0)}
}

// read returns the next command from the proxy.
func (l *lookupConn) read() (*pb.BaseCommand, error) {
	f, err := l.r.ReadFrame()
	if err != nil {
		return nil, err
	}
	return frame.Decode(f.Command)
}

func (l *lookupConn) roundTrip(cmd *pb.BaseCommand) *pb.BaseCommand {
	l.t.Helper()
	if err := frame.WriteCommand(l.conn, cmd); err != nil {
		l.t.Fatal(err)
	}
	for {
		f, err := l.r.ReadFrame()
		if err != nil {
			l.t.Fatalf("no answer to %v: %v", cmd.GetType(), err)
		}
		resp, err := frame.Decode(f.Command)
		if err != nil {
			l.t.Fatal(err)
		}
		if resp.GetType() == pb.BaseCommand_PING { // keep-alive from the proxy
			frame.WriteCommand(l.conn, frame.Pong())
			continue
		}
		return resp
	}
}

// TestGatewayLookupModeCommands speaks the lookup-mode commands on the wire to the proxy in
// front of the real brokers: each answer carries the client's request id, LOOKUP sends the
// client back through the proxy, and broker refusals arrive with the broker's code.
func TestGatewayLookupModeCommands(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	topic, owners := partitionedTopicOnBothBrokers(t, "lm", 4)
	l := dialLookup(t, proxy.Addr)

	pm := l.roundTrip(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String(topic), RequestId: proto.Uint64(1001)}}).GetPartitionMetadataResponse()
	if pm.GetRequestId() != 1001 || pm.GetPartitions() != 4 {
		t.Fatalf("PARTITIONED_METADATA answer %v", pm)
	}

	for i, owner := range owners {
		id := uint64(2000 + i)
		lr := l.roundTrip(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(fmt.Sprintf("%s-partition-%d", topic, i)), RequestId: proto.Uint64(id)}}).GetLookupTopicResponse()
		want := theRig.Brokers[owner-1].URL
		if lr.GetRequestId() != id || lr.GetResponse() != pb.CommandLookupTopicResponse_Connect ||
			lr.GetBrokerServiceUrl() != want || !lr.GetProxyThroughServiceUrl() {
			t.Fatalf("LOOKUP partition %d: %v, want Connect to %s through the proxy", i, lr, want)
		}
	}

	topics := l.roundTrip(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
		Namespace: proto.String("public/default"), RequestId: proto.Uint64(3001)}}).GetGetTopicsOfNamespaceResponse()
	if topics.GetRequestId() != 3001 || !containsPrefix(topics.GetTopics(), topic+"-partition-") {
		t.Fatalf("GET_TOPICS_OF_NAMESPACE answer (id %d) lacks %s: %v", topics.GetRequestId(), topic, topics.GetTopics())
	}

	// A schema stored by a producer comes back through the proxy.
	c := newClient(t, proxy.PulsarURL)
	schemaTopic := uniqueTopic(t, "schema")
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: schemaTopic, Schema: pulsar.NewStringSchema(nil)})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	schema := l.roundTrip(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA.Enum(), GetSchema: &pb.CommandGetSchema{
		Topic: proto.String(schemaTopic), RequestId: proto.Uint64(4001)}}).GetGetSchemaResponse()
	if schema.GetRequestId() != 4001 || schema.GetSchema().GetType() != pb.Schema_String {
		t.Fatalf("GET_SCHEMA answer %v", schema)
	}

	// The broker's own refusal reaches the client with its code and message.
	bad := l.roundTrip(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://no-such-tenant/no-such-ns/t"), RequestId: proto.Uint64(5001)}})
	lr := bad.GetLookupTopicResponse()
	if lr.GetRequestId() != 5001 || lr.GetResponse() != pb.CommandLookupTopicResponse_Failed || lr.GetMessage() == "" {
		t.Fatalf("LOOKUP in a missing namespace: %v, want Failed with the broker's message", bad)
	}
	t.Logf("broker refusal relayed: %v %q", lr.GetError(), lr.GetMessage())

	// A command that belongs on a broker connection turns the session into a routed one (the
	// client uses the proxy as its broker: docs/routed-sessions.md): it goes to the topic's
	// owner, and the session goes on.
	made := l.roundTrip(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(6001)}})
	if ok := made.GetProducerSuccess(); ok.GetRequestId() != 6001 {
		t.Fatalf("PRODUCER on a lookup connection, routed to the topic's owner: %v", made)
	}
	if pong := l.roundTrip(frame.Ping()); pong.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("PING answered with %v", pong.GetType())
	}
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
