package adminproxy

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// errSpoolBudget is a body that could not be kept because the bodies kept on disk, all
// requests together, are at admin.maxSpooledBytes.
var errSpoolBudget = errors.New("the request bodies the proxy keeps on disk for redirects are at admin.maxSpooledBytes")

// spoolBudget bounds the bytes of request bodies kept on disk, all requests together
// (admin.maxSpooledBytes): the temporary directory is a bounded volume (the chart's /tmp
// emptyDir), and one full is a full disk for everything else there too. It counts what is
// written, not what a request declares: a reservation of the declared length would let a
// client that announces a large body and then sends it slowly hold the budget for nothing.
type spoolBudget struct {
	max   int64
	used  atomic.Int64
	gauge prometheus.Gauge
}

// take counts n more bytes on disk; false, counting nothing, when that would go over.
func (b *spoolBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			b.gauge.Add(float64(n))
			return true
		}
	}
}

func (b *spoolBudget) give(n int64) {
	b.used.Add(-n)
	b.gauge.Sub(float64(n))
}

// fits reports whether n more bytes fit now (a request that declares its length is refused
// up front when its body would not).
func (b *spoolBudget) fits(n int64) bool { return b.used.Load()+n <= b.max }

func newSpoolBudget(max int64, m *Metrics) *spoolBudget {
	if max <= 0 {
		max = math.MaxInt64
	}
	m.spoolBudget.Set(float64(max))
	return &spoolBudget{max: max, gauge: m.spooled}
}

// spool keeps a request body as it is read, so that it can be sent again to the broker a
// redirect names: the first memMax bytes in memory, the rest in a temporary file (unlinked
// at once, so nothing is left behind even if the process dies) within the budget. If the file
// cannot be written, or the budget is spent, the body still streams to the first broker (most
// requests go to the right one and need no copy); only a redirect then fails.
type spool struct {
	dir    string
	memMax int
	budget *spoolBudget
	mem    []byte
	f      *os.File
	size   int64 // bytes kept: len(mem) + file length
	taken  int64 // bytes of the budget held
	err    error // the body could not be kept from here on
}

func (s *spool) write(p []byte) {
	if s.err != nil || len(p) == 0 {
		return
	}
	if s.f == nil && len(s.mem) < s.memMax {
		// The memory part fills up first, to the byte, so that what goes to disk is exactly
		// what a declared length was checked against.
		k := min(len(p), s.memMax-len(s.mem))
		s.mem = append(s.mem, p[:k]...)
		s.size += int64(k)
		if p = p[k:]; len(p) == 0 {
			return
		}
	}
	if !s.budget.take(int64(len(p))) {
		// The copy is useless from here on: its disk goes back at once.
		s.err = errSpoolBudget
		s.dropFile()
		return
	}
	s.taken += int64(len(p))
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, "pulsar-proxy-body-*")
		if err != nil {
			s.err = fmt.Errorf("keeping the request body for a redirect: %w", err)
			s.dropFile()
			return
		}
		os.Remove(f.Name()) // open file, no name: gone with the descriptor
		s.f = f
	}
	if _, err := s.f.WriteAt(p, s.size-int64(len(s.mem))); err != nil {
		s.err = fmt.Errorf("keeping the request body for a redirect: %w", err)
		s.dropFile()
		return
	}
	s.size += int64(len(p))
}

func (s *spool) readAt(p []byte, off int64) (int, error) {
	if off >= s.size {
		return 0, io.EOF
	}
	if off < int64(len(s.mem)) {
		return copy(p, s.mem[off:]), nil
	}
	fileOff := off - int64(len(s.mem))
	if max := s.size - off; int64(len(p)) > max {
		p = p[:max]
	}
	n, err := s.f.ReadAt(p, fileOff)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (s *spool) close() {
	s.dropFile()
	s.mem = nil
}

// dropFile closes the file (its space is freed: it has no name) and gives its budget back.
// Only bytes before len(mem) can be read after it, which no attempt does once s.err is set:
// the one in progress reads on from the client, a next one is refused.
func (s *spool) dropFile() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if s.taken > 0 {
		s.budget.give(s.taken)
		s.taken = 0
	}
}

// errBodyInUse means a broker connection still held an earlier attempt's body when a new
// attempt needed it (it should have closed it on the answer).
var errBodyInUse = errors.New("request body still in use by the previous attempt")

// replayBody is a client's request body that can be sent more than once. Each attempt reads
// what was already read from the client (from the spool), then goes on reading from the
// client, keeping that too. Attempts never overlap: the next one starts only after the
// broker connection closed the previous one's reader.
type replayBody struct {
	src    io.Reader
	spool  spool
	srcErr error // io.EOF once the client's body is read whole
	cur    *attemptBody
}

// next returns the body of the next attempt, waiting up to wait for the previous one to be
// closed.
func (b *replayBody) next(wait time.Duration) (*attemptBody, error) {
	if b.cur != nil {
		select {
		case <-b.cur.done:
		case <-time.After(wait):
			return nil, errBodyInUse
		}
		if b.spool.err != nil {
			return nil, b.spool.err
		}
	}
	b.cur = &attemptBody{b: b, done: make(chan struct{})}
	return b.cur, nil
}

// release frees the kept body once the last attempt's reader is closed (the broker
// connection may close it after the answer arrived); if that takes longer than wait, the
// descriptor is left to the garbage collector rather than pulled from under a reader.
func (b *replayBody) release(wait time.Duration) {
	if b.cur != nil {
		select {
		case <-b.cur.done:
		case <-time.After(wait):
			return
		}
	}
	b.spool.close()
}

// attemptBody is one attempt's reader of a replayBody.
type attemptBody struct {
	b    *replayBody
	off  int64
	once sync.Once
	done chan struct{}
}

func (a *attemptBody) Read(p []byte) (int, error) {
	b := a.b
	if a.off < b.spool.size {
		n, err := b.spool.readAt(p, a.off)
		a.off += int64(n)
		return n, err
	}
	if b.srcErr != nil {
		return 0, b.srcErr
	}
	if b.spool.err == nil && a.off != b.spool.size {
		return 0, errors.New("request body out of step with its copy")
	}
	n, err := b.src.Read(p)
	if n > 0 {
		b.spool.write(p[:n])
		a.off += int64(n)
	}
	if err != nil {
		b.srcErr = err
	}
	return n, err
}

// Close marks the attempt done; the client's body itself is the server's to close.
func (a *attemptBody) Close() error {
	a.once.Do(func() { close(a.done) })
	return nil
}
