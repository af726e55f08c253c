package mux

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// releasing is a client that is done with its frames at once (its queue written).
type releasing struct{ frames *int }

func (h releasing) Deliver(fs []Frame) error {
	for _, f := range fs {
		f.Release()
	}
	*h.frames += len(fs)
	return nil
}
func (releasing) Lost(Held) {}

// receiptsFor attaches a client per handler to c, each with producer 1 accepted, and returns
// a SEND_RECEIPT for each as its broker sends it (the connection's producer id).
func receiptsFor(t *testing.T, c *Conn, handlers ...Handler) [][]byte {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var receipts [][]byte
	for _, h := range handlers {
		mb := c.attach(h)
		id := acceptedProducer(t, c.m, mb.client, 1)
		rc, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
			ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(7)}})
		receipts = append(receipts, rc)
	}
	return receipts
}

// TestDownLoadSteadyStateAllocs: the reader's reads of a busy connection (here 2,000 receipts
// a read, for two clients whose receipts interleave) are mapped back, grouped by client and
// handed over without allocating once the load has grown to a read's worth. A member's own
// slice of frames, let go when a read brought it more than a quiet client keeps, allocated
// on every read.
func TestDownLoadSteadyStateAllocs(t *testing.T) {
	c, _ := sharedConn(t)
	var got [2]int
	receipts := receiptsFor(t, c, releasing{&got[0]}, releasing{&got[1]})
	var dl downLoad
	read := func() {
		for i := range 2000 {
			dl.add(c, pb.BaseCommand_SEND_RECEIPT, receipts[i%3%2], nil)
		}
		dl.flush(c)
	}
	read()
	allocs := testing.AllocsPerRun(20, read) // and one more run of its own
	if got[0]+got[1] != 22*2000 || got[0] == 0 || got[1] == 0 {
		t.Fatalf("the clients got %d and %d receipts of %d", got[0], got[1], 22*2000)
	}
	if poolsKeep && allocs > 0.5 {
		t.Fatalf("%.1f allocations a read of 2,000 frames", allocs)
	}
}

// appending is a client whose handler appends to the slice it is handed (Deliver's contract
// lets it: the frames are its own) and notes the types it got.
type appending struct{ got *[]pb.BaseCommand_Type }

func (h appending) Deliver(fs []Frame) error {
	for _, f := range fs {
		t, _ := f.Type()
		*h.got = append(*h.got, t)
	}
	_ = append(fs, Frame{})
	return nil
}
func (appending) Lost(Held) {}

// TestDeliverSlicesAreTheirOwn: what one client's handler does with the slice it is handed
// cannot reach the next client's frames (the clients' shares of a read sit side by side).
func TestDeliverSlicesAreTheirOwn(t *testing.T) {
	c, _ := sharedConn(t)
	var got [2][]pb.BaseCommand_Type
	receipts := receiptsFor(t, c, appending{&got[0]}, appending{&got[1]})
	var dl downLoad
	dl.add(c, pb.BaseCommand_SEND_RECEIPT, receipts[0], nil)
	dl.add(c, pb.BaseCommand_SEND_RECEIPT, receipts[1], nil)
	dl.flush(c)
	for i, g := range got {
		if len(g) != 1 || g[0] != pb.BaseCommand_SEND_RECEIPT {
			t.Errorf("client %d got %v, want one SEND_RECEIPT", i, g)
		}
	}
}
