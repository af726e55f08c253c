package mux

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// The data path's micro-benchmarks: one op is one frame. Beside allocations they report the
// proxy side's system calls per frame, counted by the kernel (/proc/self/io's syscr and
// syscw: read and write/writev calls of the whole process) less those of the benchmark's own
// far ends, which count theirs. One broker connection per client costs a write per frame up
// (and a read), so writes/frame below 1 is what coalescing saves.

// ioCalls is the process's read and write system calls so far.
func ioCalls(tb testing.TB) (reads, writes int64) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		tb.Skip("no /proc/self/io:", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := bytes.Cut(sc.Bytes(), []byte(": "))
		n, _ := strconv.ParseInt(string(v), 10, 64)
		switch string(k) {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// socketPair is two ends of a loopback TCP connection (writev and large reads as in the
// proxy).
func socketPair(tb testing.TB) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// sink reads a socket in large reads, counting its reads and bytes.
type sink struct {
	reads, bytes atomic.Int64
}

func (s *sink) drain(c net.Conn, buf []byte) {
	for {
		n, err := c.Read(buf)
		s.reads.Add(1)
		s.bytes.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// waitBytes waits (a bounded number of polls, 100 µs apart) until s has n bytes.
func (s *sink) waitBytes(tb testing.TB, n int64) {
	for i := 0; s.bytes.Load() < n; i++ {
		if i > 600_000 {
			tb.Fatalf("sink has %d of %d bytes", s.bytes.Load(), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// benchConn is a shared connection over a socket pair; the broker's end is returned.
func benchConn(b *testing.B) (*Conn, net.Conn) {
	p := NewPool(Config{Connector: &upstream.Connector{}, Linger: time.Minute, Logger: zerolog.Nop()})
	b.Cleanup(p.Close)
	proxySide, brokerSide := socketPair(b)
	c := newConn(p, Key{Addr: "broker:6650"}, &upstream.Conn{Conn: proxySide, Reader: frame.NewReader(proxySide, 0), Connected: &pb.CommandConnected{}})
	b.Cleanup(func() { c.fail(io.EOF) })
	return c, brokerSide
}

var benchSizes = []int{100, 1 << 10, 64 << 10, 1 << 20}

// warmFrames is how many frames each client sends or gets before the measurement.
const warmFrames = 20

// BenchmarkMuxUp: clients' SENDs (id mapped) onto the shared connection, written out.
func BenchmarkMuxUp(b *testing.B) {
	for _, clients := range []int{1, 100} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("clients=%d/size=%d", clients, size), func(b *testing.B) { benchUp(b, clients, size) })
		}
	}
}

func benchUp(b *testing.B, clients, size int) {
	c, broker := benchConn(b)
	var s sink
	go s.drain(broker, make([]byte, 4<<20))
	members := make([]*Member, clients)
	for i := range members {
		c.mu.Lock()
		members[i] = c.attach(nopHandler{})
		acceptedProducer(b, c.m, members[i].client, 1)
		c.mu.Unlock()
	}
	send, payload := sendCmd(1, 7), make([]byte, size)
	per := int64(frame.HeaderSize + len(send) + size) // mapped ids up to 100: as wide as the client's
	// The buffers' pool filled first, as in a proxy that runs.
	for range warmFrames {
		for _, mb := range members {
			if err := mb.Send(send, payload); err != nil {
				b.Fatal(err)
			}
		}
	}
	s.waitBytes(b, int64(warmFrames*clients)*per)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	r0, w0 := ioCalls(b)
	sr0, start := s.reads.Load(), s.bytes.Load()
	b.ResetTimer()
	n := b.N
	var wg sync.WaitGroup
	for i, mb := range members {
		k := n / clients
		if i < n%clients {
			k++
		}
		wg.Go(func() {
			for range k {
				if err := mb.Send(send, payload); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.waitBytes(b, start+int64(n)*per)
	b.StopTimer()
	r1, w1 := ioCalls(b)
	b.ReportMetric(float64(w1-w0)/float64(n), "writes/frame")
	b.ReportMetric(float64((r1-r0)-(s.reads.Load()-sr0))/float64(n), "reads/frame")
}

// queueHandler is a client whose queue is written to a socket, as a session's.
type queueHandler struct{ q *OutQueue }

func (h queueHandler) Deliver(fs []Frame) error { return h.q.PushAll(fs) }
func (h queueHandler) Lost(Held)                {}

// BenchmarkMuxDown: broker MESSAGEs for the clients' consumers read from the shared
// connection, mapped back, queued and written to each client.
func BenchmarkMuxDown(b *testing.B) {
	for _, clients := range []int{1, 100} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("clients=%d/size=%d", clients, size), func(b *testing.B) { benchDown(b, clients, size) })
		}
	}
}

func benchDown(b *testing.B, clients, size int) {
	c, broker := benchConn(b)
	var s sink
	var batch []byte // one frame for each client, written by the broker in one go
	for range clients {
		cs, bs := socketPair(b)
		q := NewOutQueue(64 << 20)
		q.Start(cs, func(error) {})
		go s.drain(bs, make([]byte, 4<<20))
		c.mu.Lock()
		mb := c.attach(queueHandler{q})
		id := acceptedConsumer(b, c.m, mb.client, 1)
		c.mu.Unlock()
		batch = append(batch, messageFrame(b, id, size)...)
	}
	per := int64(len(messageFrame(b, 1, size))) // as the clients get it: their own id, 1
	// The buffers' pool filled first, as in a proxy that runs.
	for i := range warmFrames {
		s.waitBytes(b, int64(i)*per*int64(clients)-downWindow)
		if _, err := broker.Write(batch); err != nil {
			b.Fatal(err)
		}
	}
	s.waitBytes(b, int64(warmFrames)*per*int64(clients))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	r0, w0 := ioCalls(b)
	sr0, start := s.reads.Load(), s.bytes.Load()
	b.ResetTimer()
	rounds := (b.N + clients - 1) / clients
	var writes int64
	for i := range rounds {
		// As a broker within its consumers' permits: at most downWindow ahead of the clients.
		s.waitBytes(b, start+int64(i)*per*int64(clients)-downWindow)
		if _, err := broker.Write(batch); err != nil {
			b.Fatal(err)
		}
		writes++
	}
	s.waitBytes(b, start+int64(rounds)*per*int64(clients))
	b.StopTimer()
	r1, w1 := ioCalls(b)
	frames := float64(rounds * clients)
	b.ReportMetric(float64((r1-r0)-(s.reads.Load()-sr0))/frames, "reads/frame")
	b.ReportMetric(float64((w1-w0)-writes)/frames, "writes/frame")
}

// downWindow is how far the broker's writes in BenchmarkMuxDown may run ahead of what the
// clients got: less than the clients' queue bound, as consumers' permits keep a broker.
const downWindow = 16 << 20

// acceptedConsumer subscribes consumer own for c and has the broker accept it; the
// connection's id is returned.
func acceptedConsumer(tb testing.TB, m *Mapper, c *Client, own uint64) uint64 {
	tb.Helper()
	sub, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String("t"), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(own), RequestId: proto.Uint64(own)}})
	out, err := m.UpBytes(c, sub)
	if err != nil {
		tb.Fatal(err)
	}
	sent := mustDecode(out).GetSubscribe()
	ok, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: sent.RequestId}})
	if _, owner, err := m.DownBytes(ok); err != nil || owner != c {
		tb.Fatalf("SUCCESS: %v", err)
	}
	return sent.GetConsumerId()
}

// messageFrame is a MESSAGE for consumer id with a payload section of size bytes.
func messageFrame(tb testing.TB, id uint64, size int) []byte {
	msg := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
		ConsumerId: proto.Uint64(id), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}}}
	f, err := Encode(msg, make([]byte, size))
	if err != nil {
		tb.Fatal(err)
	}
	return append(f.Head, f.Payload...)
}
