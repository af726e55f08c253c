package session

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// lightProtoRelay stands between the proxy and a test broker and reads each command as
// Pulsar 4.0.8's LightProto does before dispatching it: BaseCommand.parseFrom parses the
// command's own sub-message eagerly, and LightProtoCodec.skipUnknownField throws
// IllegalArgumentException on a group wire type (3 or 4); the exception reaches
// ServerCnx.exceptionCaught, which closes the connection. The relay closes it likewise and
// counts the closes.
type lightProtoRelay struct {
	mu     sync.Mutex
	closes int
}

func newLightProtoRelay(t *testing.T, to brokers.Broker) (*lightProtoRelay, brokers.Broker) {
	r := &lightProtoRelay{}
	return r, relayTo(t, to, r.upstream)
}

func (r *lightProtoRelay) upstream(c, b net.Conn) {
	defer c.Close()
	defer b.Close()
	hdr := make([]byte, 8)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		rest := make([]byte, binary.BigEndian.Uint32(hdr)-4)
		if _, err := io.ReadFull(c, rest); err != nil {
			return
		}
		if !lightProtoReads(rest[:binary.BigEndian.Uint32(hdr[4:])]) {
			r.mu.Lock()
			r.closes++
			r.mu.Unlock()
			return // ServerCnx.exceptionCaught: ctx.close()
		}
		if _, err := b.Write(append(append([]byte(nil), hdr...), rest...)); err != nil {
			return
		}
	}
}

// lightProtoReads: the command and its own sub-message parse as LightProto parses them
// (every field of the sub-message known under its wire type or skipped; skipping a group
// throws).
func lightProtoReads(command []byte) bool {
	v, err := brokerReads(command)
	if err != nil {
		return false
	}
	m := &modelReader{b: v.subs[uint32(v.typ)]}
	for len(m.b) > 0 {
		tag, err := m.varint32()
		if err != nil || m.skip(tag) != nil {
			return false
		}
	}
	return true
}

func (r *lightProtoRelay) closed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closes
}

// TestUnknownGroupNeverReachesASharedConnection: a client on a shared broker connection
// sends a LOOKUP (no id of its own needed) whose sub-message carries an unknown field 100
// as an empty group (a3 06 a4 06). Go's protobuf keeps it as an unknown field; had the
// edge's canonical form kept it, the broker's parser would throw on the group and close the
// shared connection: every neighbour would lose its producers and consumers, as often as
// the attacker liked.
func TestUnknownGroupNeverReachesASharedConnection(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	relay, front := newLightProtoRelay(t, target)
	cfg, _ := muxConfig(t, 1<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{front})
	n := newNeighbour(t, addr, front)
	n.check(1)

	sub, err := proto.Marshal(&pb.CommandLookupTopic{Topic: proto.String("t"), RequestId: proto.Uint64(1)})
	if err != nil {
		t.Fatal(err)
	}
	sub = append(sub, 0xa3, 0x06, 0xa4, 0x06) // field 100, start group, end group
	cmd := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.BaseCommand_LOOKUP))
	cmd = protowire.AppendBytes(protowire.AppendTag(cmd, 23, protowire.BytesType), sub)
	hostile := muxClient(t, addr, front)
	hostile.c.Write(rawFrame(cmd))
	got := hostile.recv()
	if closes := relay.closed(); closes > 0 {
		t.Fatalf("a LOOKUP with an unknown group went to the broker (the hostile client got %v); the broker's parser throws on it and closes the shared connection under every client (%d closes)", got.GetType(), closes)
	}
	n.check(2)
	_ = b
}
