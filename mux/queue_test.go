package mux

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// pingFrame is a PING as a queued frame.
func pingFrame(t *testing.T) Frame {
	f, err := Encode(frame.Ping(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// hasWriter reports whether the queue has a writer now.
func (q *OutQueue) hasWriter() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.writing
}

// TestQueueWriterRunsOnlyWhileFramesWait: a started queue writes what is pushed, in order,
// and holds no goroutine once it has been empty for writerIdle; a push starts a new writer;
// Close(nil) ends it after what was queued is written.
func TestQueueWriterRunsOnlyWhileFramesWait(t *testing.T) {
	client, far := net.Pipe()
	defer far.Close()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(far); got <- b }()

	q := NewOutQueue(1 << 20)
	ended := make(chan error, 1)
	q.Start(client, func(err error) { ended <- err })
	ping := pingFrame(t)
	before := runtime.NumGoroutine()
	for round := range 3 {
		for range 10 {
			if err := q.Push(ping); err != nil {
				t.Fatal(err)
			}
		}
		wait.Until(t, 5*time.Second, "the writer to end with the queue empty", func() bool { return !q.hasWriter() })
		wait.Until(t, 5*time.Second, "the goroutines to be as before the burst", func() bool { return runtime.NumGoroutine() <= before })
		t.Logf("burst %d written; writer gone", round)
	}
	q.Push(ping)
	q.Close(nil)
	if err := <-ended; err != nil {
		t.Fatalf("ended with %v", err)
	}
	client.Close()
	if want := bytes.Repeat(append(ping.Head, ping.Payload...), 31); !bytes.Equal(<-got, want) {
		t.Fatal("the client did not get the 31 frames in order")
	}
	if err := q.Push(ping); err != nil {
		t.Fatalf("a push after a clean close: %v (the queue's close error is nil)", err)
	}
}

// TestQueueEndsOnce: done is told exactly once, whatever ends the queue: a close while
// nothing is queued, a failed write, a push over the bound.
func TestQueueEndsOnce(t *testing.T) {
	ping := pingFrame(t)
	cases := []struct {
		name string
		run  func(q *OutQueue, client net.Conn)
		want error
	}{
		{"close while empty", func(q *OutQueue, _ net.Conn) { q.Close(nil); q.Close(io.EOF) }, nil},
		{"failed write", func(q *OutQueue, client net.Conn) { client.Close(); q.Push(ping); q.Close(nil) }, io.ErrClosedPipe},
		{"over the bound", func(q *OutQueue, _ net.Conn) {
			for q.Push(ping) == nil { // the far end does not read: the first write waits
			}
		}, ErrQueueFull},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, far := net.Pipe()
			q := NewOutQueue(4 * ping.held())
			ended := make(chan error, 3)
			q.Start(client, func(err error) { ended <- err })
			tc.run(q, client)
			if tc.want == ErrQueueFull {
				far.Close() // the writer's write fails, and it ends
			}
			var err error
			select {
			case err = <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("done was not told")
			}
			if !errors.Is(err, tc.want) && !(tc.want == ErrQueueFull && err != nil) {
				t.Fatalf("ended with %v, want %v", err, tc.want)
			}
			time.Sleep(20 * time.Millisecond)
			if n := len(ended); n != 0 {
				t.Fatalf("done told %d more times", n)
			}
			far.Close()
		})
	}
}
