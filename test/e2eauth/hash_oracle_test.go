package e2eauth

import (
	"net"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The topic-list hash oracle (issue 25, finding 3): a broker answers a GET_TOPICS_OF_NAMESPACE
// whose topics_hash matches the namespace's full list with changed=false and no topics. A
// client allowed part of the namespace that could pass its own hash would learn, guess by
// guess, the names the proxy hides. Carol may see acme/listing/a-*; b-1 is hidden. She guesses
// the hidden name among candidates, hashing each guess with what she sees: on a lookup
// connection and on a direct session (multiplexed in TestAuthMultiplexed) no answer differs
// from a wrong guess's, so she learns nothing. The control: through a proxy without a policy
// the right guess of the whole list does get changed=false from the broker, so the oracle
// is real.
func TestTopicsHashOracleLearnsNothing(t *testing.T) {
	p := startProxy(t, `
rules:
  - roles: [carol]
    resources: ["acme/listing/a-*"]
    actions: [lookup, consume]
`, "")
	visible := []string{"persistent://acme/listing/a-1", "persistent://acme/listing/a-2"}
	guesses := []string{"a-3", "b-0", "b-1", "b-2", "secret"}
	probe := func(name string, c net.Conn, r *frame.Reader) {
		for i, g := range guesses {
			hash := edge.TopicsHash(append([]string{"persistent://acme/listing/" + g}, visible...))
			got := listWithHash(t, c, r, uint64(9000+i), hash)
			if !got.GetChanged() || strings.Join(got.GetTopics(), ",") != strings.Join(visible, ",") {
				t.Fatalf("%s: guess %q got changed=%v topics %v: an answer that differs by guess leaks the hidden name",
					name, g, got.GetChanged(), got.GetTopics())
			}
		}
	}
	c, r, resp := rawConnect(t, p.Addr, "token", []byte(mustToken("carol", 0)))
	if resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: %v", resp)
	}
	probe("lookup connection", c, r)
	c, r = directConnect(t, p.Addr, strings.TrimPrefix(brokers().BrokerURL(1), "pulsar://"), "carol")
	probe("direct session", c, r)

	// The control: the broker itself answers the right guess of the full list as unchanged
	// (a proxy without a policy hides nothing and passes the hash on).
	all := startProxy(t, "", "")
	c, r = directConnect(t, all.Addr, strings.TrimPrefix(brokers().BrokerURL(1), "pulsar://"), "carol")
	full := append([]string{"persistent://acme/listing/b-1"}, visible...)
	if got := listWithHash(t, c, r, 9100, edge.TopicsHash(full)); got.GetChanged() {
		t.Fatalf("the broker answered the full list's hash with changed=true (%v): the control does not show the oracle", got.GetTopics())
	}
}

// listWithHash asks for acme/listing's topics, giving the hash of the list the client holds.
func listWithHash(t *testing.T, c net.Conn, r *frame.Reader, id uint64, hash string) *pb.CommandGetTopicsOfNamespaceResponse {
	t.Helper()
	frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
		RequestId: proto.Uint64(id), Namespace: proto.String(nsListing), Mode: pb.CommandGetTopicsOfNamespace_PERSISTENT.Enum(),
		TopicsHash: proto.String(hash)}})
	resp := readCmd(t, r)
	got := resp.GetGetTopicsOfNamespaceResponse()
	if got == nil || got.GetRequestId() != id {
		t.Fatalf("GET_TOPICS_OF_NAMESPACE %d answered by %v", id, resp)
	}
	return got
}
