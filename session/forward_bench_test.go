package session

import (
	"context"
	"io"

	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The forwarding benchmarks run a real direct session over loopback TCP: a client socket,
// the session's two pipes, and a stand-in broker. One side writes b.N copies of a prebuilt
// frame, the other reads until it has them all, so MB/s is what went through the proxy and
// allocs/op counts every goroutine (writer and reader included; both allocate nothing).
//
//	go test -run '^$' -bench BenchmarkForward -count 6 ./session | tee new.txt; benchstat old.txt new.txt

var benchSizes = []int{100, 1 << 10, 64 << 10, 100 << 10, 1 << 20}

func BenchmarkForwardSEND(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) { benchForward(b, pb.BaseCommand_SEND, size) })
	}
}

func BenchmarkForwardMESSAGE(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) { benchForward(b, pb.BaseCommand_MESSAGE, size) })
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// payloadFrame builds one SEND (client to broker) or MESSAGE (broker to client) frame.
func payloadFrame(tb testing.TB, t pb.BaseCommand_Type, size int) []byte {
	tb.Helper()
	cmd := &pb.BaseCommand{Type: t.Enum()}
	if t == pb.BaseCommand_SEND {
		cmd.Send = &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)}
	} else {
		cmd.Message = &pb.CommandMessage{ConsumerId: proto.Uint64(1), MessageId: &pb.MessageIdData{
			LedgerId: proto.Uint64(12), EntryId: proto.Uint64(34)}}
	}
	md := &pb.MessageMetadata{ProducerName: proto.String("bench"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(1)}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	raw, err := frame.AppendPayloadCommand(nil, cmd, nil, md, payload)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// BenchmarkForwardSpliceThreshold forwards SEND frames that fit the large read buffer either
// through it (copy) or with their remainder spliced, to place forward's default threshold (0: the default).
func BenchmarkForwardSpliceThreshold(b *testing.B) {
	for _, size := range []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 60 << 10} {
		for _, mode := range []struct {
			name        string
			spliceAbove int
		}{{"copy", 1 << 30}, {"splice", 1}} {
			b.Run(sizeName(size)+"/"+mode.name, func(b *testing.B) {
				benchForwardWith(b, pb.BaseCommand_SEND, size, mode.spliceAbove, false)
			})
		}
	}
}

// BenchmarkForwardCopyPath forwards SEND frames from a client connection the pipe cannot see
// as a *net.TCPConn, as with TLS (without the cryptography): no splice, no reads that release
// the buffer while waiting; large frames go through the read buffer a chunk at a time.
func BenchmarkForwardCopyPath(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			benchForwardWith(b, pb.BaseCommand_SEND, size, 0, true)
		})
	}
}

func benchForward(b *testing.B, t pb.BaseCommand_Type, size int) {
	benchForwardWith(b, t, size, 0, false)
}

// opaqueConns hides the type of accepted connections, as a TLS listener would.
type opaqueConns struct{ net.Listener }

func (l opaqueConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return struct{ net.Conn }{c}, err
}

func benchForwardWith(b *testing.B, t pb.BaseCommand_Type, size, spliceAbove int, opaqueClient bool) {
	client, broker := directSessionPair(b, spliceAbove, opaqueClient)
	benchForwardOn(b, t, size, client, broker)
}

// BenchmarkForwardPassthrough forwards SEND frames through a session without security, which
// moves bytes socket to socket without reading frames (session.passthrough).
func BenchmarkForwardPassthrough(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			cfg := testConfig()
			cfg.Passthrough = true
			client, broker := directSessionPairWith(b, cfg, 0, false)
			benchForwardOn(b, pb.BaseCommand_SEND, size, client, broker)
		})
	}
}

// benchForwardOn writes b.N frames of type t and size into one end of a direct session and
// reads them at the other.
func benchForwardOn(b *testing.B, t pb.BaseCommand_Type, size int, client, broker net.Conn) {
	raw := payloadFrame(b, t, size)
	src, dst := client, broker
	if t == pb.BaseCommand_MESSAGE {
		src, dst = broker, client
	}
	want := int64(len(raw)) * int64(b.N)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		var got int64
		for got < want {
			n, err := dst.Read(buf[:min(int64(len(buf)), want-got)])
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for range b.N {
		if _, err := src.Write(raw); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	// CPU time of the whole process (writer, proxy, reader) per frame: unlike ns/op it does
	// not grow when other processes take the machine's cores.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// directSessionPair starts a session server and a stand-in broker, completes a direct-mode
// handshake, and returns the client's and the broker's sockets past CONNECTED.
func directSessionPair(b *testing.B, spliceAbove int, opaqueClient bool) (client, broker net.Conn) {
	b.Helper()
	return directSessionPairWith(b, testConfig(), spliceAbove, opaqueClient)
}

// directSessionPairWith is directSessionPair with the session server's config.
func directSessionPairWith(b *testing.B, cfg Config, spliceAbove int, opaqueClient bool) (client, broker net.Conn) {
	b.Helper()
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	brokerConn := make(chan net.Conn, 1)
	go func() {
		defer bl.Close()
		c, err := bl.Accept()
		if err != nil {
			brokerConn <- nil
			return
		}
		r := frame.NewReader(c, frame.DefaultMaxFrameSize)
		if _, err := r.ReadFrame(); err != nil { // CONNECT
			c.Close()
			brokerConn <- nil
			return
		}
		frame.WriteCommand(c, frame.Connected("bench-broker", 21, 5<<20))
		brokerConn <- c
	}()
	host, port, _ := net.SplitHostPort(bl.Addr().String())
	target := brokers.Broker{URL: "pulsar://" + bl.Addr().String(), Host: host, Port: port}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if opaqueClient {
		ln = opaqueConns{ln}
	}
	cfg.KeepAliveInterval = time.Minute
	srv := NewServer(cfg, nil, oneTarget{target}, NewMetrics(prometheus.NewRegistry()), zerolog.Nop())
	srv.spliceAbove = spliceAbove
	served := make(chan struct{})
	go func() { srv.Serve(ln); close(served) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	connect := connectCmd(func(cc *pb.CommandConnect) { cc.ProxyToBrokerUrl = proto.String(target.Addr()) })
	if err := frame.WriteCommand(c, connect); err != nil {
		b.Fatal(err)
	}
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	f, err := r.ReadFrame()
	if err != nil {
		b.Fatal(err)
	}
	if t, _ := frame.PeekType(f.Command); t != pb.BaseCommand_CONNECTED {
		b.Fatalf("got %v, want CONNECTED", t)
	}
	bc := <-brokerConn
	if bc == nil {
		b.Fatal("stand-in broker got no CONNECT")
	}
	b.Cleanup(func() {
		c.Close()
		bc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	return c, bc
}

// BenchmarkForwardRoundTrip: one 1 KiB SEND at a time through a direct session to a broker
// that echoes it; ns/op is the round trip, so it shows what each forwarding way adds to
// latency (compare framed and passthrough in one run).
func BenchmarkForwardRoundTrip(b *testing.B) {
	for _, passthrough := range []bool{false, true} {
		b.Run(map[bool]string{false: "framed", true: "passthrough"}[passthrough], func(b *testing.B) {
			cfg := testConfig()
			cfg.Passthrough = passthrough
			client, broker := directSessionPairWith(b, cfg, 0, false)
			raw := payloadFrame(b, pb.BaseCommand_SEND, 1<<10)
			go io.Copy(broker, broker) // the echo
			back := make([]byte, len(raw))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := client.Write(raw); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(client, back); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
