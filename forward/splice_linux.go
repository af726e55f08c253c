package forward

import (
	"cmp"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// splicePipeSize is the capacity asked of a splice pipe (F_SETPIPE_SZ); one splice(2) moves
// at most what its pipe holds. At the default 64 KiB, a batch of a hundred 1 KiB messages (a
// frame of about 100 KiB) takes two splices into the pipe and two out of it; at 256 KiB one of
// each. At most maxGrownPipes pipes are grown at once: the kernel counts pipe pages per user,
// summed over every process of that uid (pods of one runAsUser on a node share it), against
// pipe-user-pages-soft (16,384 pages by default), and past it gives every new pipe of the
// user two pages. 32 grown pipes take 2,048 pages, what 128 pipes of the default size take.
const (
	splicePipeSize = 256 << 10
	maxGrownPipes  = 32
)

// canPassthrough: the kernel can move bytes socket to socket here.
const canPassthrough = true

// CanPassthrough: the kernel moves an unframed stream socket to socket here (Config.Unframed
// between two TCP sockets); elsewhere every direction is forwarded frame by frame.
const CanPassthrough = canPassthrough

// passthrough forwards src to dst without looking at frames: the kernel moves the bytes
// from one socket to the other through a pipe (splice(2)), so they never enter user space.
// It serves a direction nothing needs to see (Config.Unframed). It returns io.EOF when
// src ends.
//
// A pipe is held only while bytes are in it: the read side splices with the source
// non-blocking inside the poller's callback, so an idle direction waits holding nothing
// but its goroutine, like the frame pipe's raw reads.
func (p *Pipe) passthrough(src, dst *net.TCPConn) error {
	if err := p.forwardReadAhead(dst); err != nil {
		return err
	}
	sc, err := newSplicer(p, src, dst)
	if err != nil {
		return err
	}
	p.splice = sc
	return p.splicing()
}

// newSplicer is the splicing state of p from src to dst.
func newSplicer(p *Pipe, src, dst *net.TCPConn) (*splicer, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return nil, err
	}
	wc, err := dst.SyscallConn()
	if err != nil {
		return nil, err
	}
	sc := &splicer{rc: rc, wc: wc, p: p}
	sc.fillFn, sc.drainFn = sc.fill, sc.drain // bound once: a method value allocates
	return sc, nil
}

// splicing moves bytes until src ends, or until it parks (ErrParked) while src is idle.
func (p *Pipe) splicing() error {
	sc := p.splice
	for {
		if err := sc.rc.Read(sc.fillFn); err != nil {
			switch err = p.waitIdle(err, sc.sp == nil); err {
			case nil:
				continue
			case ErrParked:
				return err
			}
			sc.inErr = err
		}
		if sc.moved > 0 {
			if err := sc.writeOut(); err != nil {
				return err
			}
			p.count(0, sc.moved)
			sc.moved = 0
		}
		if sc.inErr != nil {
			sc.p.pipes.put(sc.sp)
			sc.sp = nil
			return sc.inErr
		}
	}
}

// splicer is one direction's state between the poller's callbacks: the pipe it holds (nil
// while idle), what the last fill moved, and what drain still has to write.
type splicer struct {
	p               *Pipe
	rc, wc          syscall.RawConn
	fillFn, drainFn func(uintptr) bool
	sp              *splicePipe
	moved           int
	pending         int
	remain          int64 // for a frame's rest (spliceRest): what is still to come; 0 in passthrough
	inErr           error
	outErr          error
}

// fill splices what the source has into the pipe, taking a pipe first; with nothing to
// read it gives the (empty) pipe back and asks the poller to wait.
func (sc *splicer) fill(fd uintptr) bool {
	if sc.sp == nil {
		if sc.sp, sc.inErr = sc.p.pipes.get(); sc.inErr != nil {
			return true
		}
	}
	want := sc.sp.size
	if sc.remain > 0 {
		want = int(min(sc.remain, int64(want)))
	}
	for {
		n, err := syscall.Splice(int(fd), nil, sc.sp.w, nil, want, spliceFlags)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN && sc.remain > 0:
			return false // the rest of a frame is due: no idle deadline, the pipe kept
		case err == syscall.EAGAIN:
			sc.p.pipes.put(sc.sp) // empty: nothing is held while waiting
			sc.sp = nil
			sc.p.armIdle()
			return false
		case err != nil:
			sc.inErr = os.NewSyscallError("splice", err)
		case n == 0:
			sc.inErr = io.EOF
		default:
			sc.moved = int(n)
		}
		return true
	}
}

// writeOut writes what the last fill moved into the pipe to dst, waiting while dst is full;
// a write that does not return marks dst as not reading for the stall watchdog. On failure
// the pipe, which may still hold bytes, is discarded.
func (sc *splicer) writeOut() error {
	sc.pending = sc.moved
	if m := sc.p.dst.notRead; m != nil {
		m.Begin()
		defer m.End()
	}
	if err := cmp.Or(sc.wc.Write(sc.drainFn), sc.outErr); err != nil {
		sc.p.pipes.discard(sc.sp)
		sc.sp = nil
		return err
	}
	return nil
}

// drain splices the pipe's pending bytes into the destination, asking the poller to wait
// while it is full (backpressure: until then, the source is not read).
func (sc *splicer) drain(fd uintptr) bool {
	for sc.pending > 0 {
		k, err := syscall.Splice(sc.sp.r, nil, int(fd), nil, sc.pending, spliceFlags)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			sc.outErr = os.NewSyscallError("splice", err)
			return true
		}
		sc.pending -= int(k)
	}
	return true
}

// spliceRest moves the unread rest of a frame, n bytes, from src to dst in the kernel; the
// caller holds dst's lock. Like a buffered write, a write that does not return marks dst as
// not reading for the stall watchdog, and bytes that arrive mark the frame's progress.
func (p *Pipe) spliceRest(n int64) error {
	if p.rest == nil {
		sc, err := newSplicer(p, p.srcTCP, p.dstTCP)
		if err != nil {
			return err
		}
		p.rest = sc
	}
	sc := p.rest
	if sc.sp == nil {
		sp, err := p.pipes.get()
		if err != nil { // out of descriptors for a pipe: copy the rest instead
			return p.copyThroughBuffer(n)
		}
		sc.sp = sp
	}
	sc.remain, sc.inErr, sc.outErr = n, nil, nil
	defer func() { sc.remain = 0 }()
	for sc.remain > 0 {
		if err := sc.rc.Read(sc.fillFn); err != nil {
			sc.inErr = err
		}
		if sc.inErr != nil {
			if sc.sp != nil {
				sc.p.pipes.put(sc.sp) // empty: a fill that failed moved nothing
				sc.sp = nil
			}
			return eofIsUnexpected(sc.inErr)
		}
		p.restDue(false)
		if err := sc.writeOut(); err != nil {
			return err
		}
		p.restDue(true)
		sc.remain -= int64(sc.moved)
		sc.moved = 0
	}
	sc.p.pipes.put(sc.sp)
	sc.sp = nil
	return nil
}

// forwardReadAhead writes the bytes the handshake read past CONNECT (or CONNECTED) first.
func (p *Pipe) forwardReadAhead(dst net.Conn) error {
	head := p.takeReadAhead()
	if len(head) == 0 {
		return nil
	}
	if _, err := dst.Write(head); err != nil {
		return err
	}
	p.count(0, len(head))
	return nil
}

const spliceFlags = 0x1 | 0x2 // SPLICE_F_MOVE | SPLICE_F_NONBLOCK

// splicePipe is a kernel pipe used as the in-kernel buffer between two sockets, and what it
// holds.
type splicePipe struct {
	r, w  int
	size  int
	grown bool // counted in its splicePipes' grown
}

// splicePipes keeps a few empty pipes for reuse: making one costs two system calls and two
// descriptors, and most sessions need one only for a moment at a time. Beyond the bound,
// pipes are closed rather than kept. One per Buffers.
type splicePipes struct {
	sync.Mutex
	free    []*splicePipe
	held    int  // out of the free list, for tests: an idle session holds none
	grown   int  // pipes open at splicePipeSize
	refused bool // the kernel would not grow a pipe: asking again costs a system call each
}

const maxFreeSplicePipes = 64

func (ps *splicePipes) get() (*splicePipe, error) {
	ps.Lock()
	defer ps.Unlock()
	var sp *splicePipe
	if n := len(ps.free); n > 0 {
		sp = ps.free[n-1]
		ps.free = ps.free[:n-1]
	} else {
		var fds [2]int
		if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
			return nil, os.NewSyscallError("pipe2", err)
		}
		sp = &splicePipe{r: fds[0], w: fds[1], size: 64 << 10}
		if n, err := unix.FcntlInt(uintptr(sp.w), unix.F_GETPIPE_SZ, 0); err == nil {
			sp.size = n
		}
	}
	ps.held++
	ps.grow(sp) // an empty pipe, new or reused, may grow
	return sp, nil
}

// grow gives sp splicePipeSize while fewer than maxGrownPipes are grown; a pipe that already
// holds as much (a kernel with 64 KiB pages makes 1 MiB pipes) is left as it is. The caller
// holds the lock.
func (ps *splicePipes) grow(sp *splicePipe) {
	if sp.grown || sp.size >= splicePipeSize || ps.refused || ps.grown >= maxGrownPipes {
		return
	}
	n, err := unix.FcntlInt(uintptr(sp.w), unix.F_SETPIPE_SZ, splicePipeSize)
	if err != nil { // EPERM: past pipe-user-pages-soft, or pipe-max-size below the size
		ps.refused = true
		return
	}
	sp.size, sp.grown = n, true
	ps.grown++
}

// forget takes a pipe that is about to be closed out of the count; the caller holds the lock.
// Closing happens outside it: a full pipe frees its pages then.
func (ps *splicePipes) forget(sp *splicePipe) {
	if sp.grown {
		ps.grown--
	}
}

func (sp *splicePipe) close() {
	syscall.Close(sp.r)
	syscall.Close(sp.w)
}

// discard closes a pipe that may still hold bytes.
func (ps *splicePipes) discard(sp *splicePipe) {
	ps.Lock()
	ps.held--
	ps.forget(sp)
	ps.Unlock()
	sp.close()
}

// put returns an empty pipe (nil: nothing to return).
func (ps *splicePipes) put(sp *splicePipe) {
	if sp == nil {
		return
	}
	ps.Lock()
	ps.held--
	if len(ps.free) < maxFreeSplicePipes {
		ps.free = append(ps.free, sp)
		ps.Unlock()
		return
	}
	ps.forget(sp)
	ps.Unlock()
	sp.close()
}
