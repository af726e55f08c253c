// Package fakebroker is a stand-in Pulsar broker for unit tests: it accepts connections on
// loopback, reads their frames and hands each decoded command to the test's handler, which
// answers on the connection. It speaks only what a handler writes; it proves nothing about
// Pulsar (the real brokers of test/ do).
package fakebroker

import (
	"net"
	"sync"
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Handler takes one command a connection sent; it may write answers to c.
type Handler func(c net.Conn, cmd *pb.BaseCommand)

// Broker is a listening stand-in broker, stopped when the test ends.
type Broker struct {
	Addr string

	mu    sync.Mutex
	conns []net.Conn
	open  int
}

// Start listens on loopback and serves every connection with handle until the test ends.
func Start(t testing.TB, handle Handler) *Broker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &Broker{Addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		b.DropConnections()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.open++
			b.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { c.Close(); b.mu.Lock(); b.open--; b.mu.Unlock() }()
				serve(c, handle)
			}()
		}
	}()
	return b
}

func serve(c net.Conn, handle Handler) {
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return
		}
		cmd, err := frame.Decode(f.Command)
		if err != nil {
			return
		}
		handle(c, cmd)
	}
}

// Conns are the connections accepted so far (closed ones included).
func (b *Broker) Conns() []net.Conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]net.Conn(nil), b.conns...)
}

// Open is how many connections are still open.
func (b *Broker) Open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// DropConnections closes every connection, as a broker that goes away does.
func (b *Broker) DropConnections() {
	for _, c := range b.Conns() {
		c.Close()
	}
}
