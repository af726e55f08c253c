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

// TestQueueBoundCountsWhatIsBeingWritten: the frames a writer is stuck writing to a client
// that does not read stay counted, so the queue takes no more than its bound in all (it
// took a batch and a second bound's worth).
func TestQueueBoundCountsWhatIsBeingWritten(t *testing.T) {
	client, far := net.Pipe() // the far end never reads: the writer's first write waits
	defer far.Close()
	f, err := EncodeBytes(pingFrame(t).Command(), make([]byte, 1<<10))
	if err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	q := NewOutQueue(limit)
	accepted := 0
	for accepted+f.held() <= limit/2 {
		if err := q.Push(f); err != nil {
			t.Fatal(err)
		}
		accepted += f.held()
	}
	q.Start(client, func(error) {})
	wait.Until(t, 5*time.Second, "the writer to take the queued frames", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.frames.Len() == 0
	})
	for q.Push(f) == nil {
		accepted += f.held()
	}
	if accepted > limit {
		t.Fatalf("a queue bounded at %d bytes took %d bytes from a client that does not read", limit, accepted)
	}
	t.Logf("took %d bytes (bound %d) before refusing", accepted, limit)
}

// TestRefusedFramesAreReleased: frames a push does not queue (the queue is over its bound,
// or closed) go back to their pools; their chunk is kept by none of them.
func TestRefusedFramesAreReleased(t *testing.T) {
	ping := pingFrame(t)
	for _, closed := range []bool{false, true} {
		q := NewOutQueue(2 * ping.held()) // not started: nothing is written
		if closed {
			q.Close(io.EOF)
		}
		ch := &chunk{}
		ch.refs.Store(5) // four frames and the member's hold
		fs := make([]Frame, 4)
		for i := range fs {
			fs[i] = ping
			fs[i].chunk = ch
		}
		err := q.PushAll(fs)
		q.mu.Lock()
		queued := q.frames.Len()
		q.mu.Unlock()
		if err == nil {
			t.Fatal("four frames went into a queue bounded at two")
		}
		if got, want := ch.refs.Load(), int32(1+queued); got != want {
			t.Fatalf("closed %v: the chunk has %d references after %d of 4 frames were queued; want %d", closed, got, queued, want)
		}
	}
}

// TestReadingClientTakesAFrameOverItsBound: a message larger than a client's bound is
// queued when nothing else waits, and so is the frame that comes while it is being written
// to a client that reads (the bound counting what is being written refused it: a reading
// client was disconnected as a slow consumer).
func TestReadingClientTakesAFrameOverItsBound(t *testing.T) {
	client, far := net.Pipe()
	defer far.Close()
	release := make(chan struct{})
	go func() {
		<-release // reads once the big frame's write has begun
		io.Copy(io.Discard, far)
	}()
	big, err := EncodeBytes(pingFrame(t).Command(), make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	q := NewOutQueue(64 << 10)
	if err := q.Push(big); err != nil {
		t.Fatalf("a frame over the bound, alone: %v", err)
	}
	q.Start(client, func(error) {})
	wait.Until(t, 5*time.Second, "the writer to take the big frame", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.frames.Len() == 0
	})
	if err := q.Push(pingFrame(t)); err != nil {
		t.Fatalf("a frame pushed while the big one is written: %v (the queue holds %d bytes)", err, q.Bytes())
	}
	close(release)
	q.Close(nil)
}
