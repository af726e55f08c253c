package session

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// spliceChunk is the most one splice(2) asks of the source: a pipe holds 64 KiB by default.
const spliceChunk = 64 << 10

// canPassthrough: the kernel can move bytes socket to socket here.
const canPassthrough = true

// passthrough forwards src to dst without looking at frames: the kernel moves the bytes
// from one socket to the other through a pipe (splice(2)), so they never enter user space.
// It serves a direction nothing needs to see (see session.forward). It returns io.EOF when
// src ends.
//
// A pipe is held only while bytes are in it: the read side splices with the source
// non-blocking inside the poller's callback, so an idle direction waits holding nothing
// but its goroutine, like the frame pipe's raw reads.
func (p *pipe) passthrough(src, dst *net.TCPConn) error {
	if err := p.forwardReadAhead(dst); err != nil {
		return err
	}
	rc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	wc, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	var (
		sp    *splicePipe
		inErr error
		moved int
	)
	fill := func(fd uintptr) bool {
		if sp == nil {
			if sp, inErr = getSplicePipe(); inErr != nil {
				return true
			}
		}
		for {
			n, err := syscall.Splice(int(fd), nil, sp.w, nil, spliceChunk, spliceFlags)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				putSplicePipe(sp) // empty: nothing is held while waiting
				sp = nil
				return false
			case err != nil:
				inErr = os.NewSyscallError("splice", err)
			case n == 0:
				inErr = io.EOF
			default:
				moved = int(n)
			}
			return true
		}
	}
	for {
		if err := rc.Read(fill); err != nil {
			inErr = err
		}
		if moved > 0 {
			if err := drainTo(wc, sp, moved); err != nil {
				discardSplicePipe(sp) // may hold bytes that will never be written
				return err
			}
			p.count(0, moved)
			moved = 0
		}
		if inErr != nil {
			if sp != nil {
				putSplicePipe(sp)
			}
			return inErr
		}
	}
}

// forwardReadAhead writes the bytes the handshake read past CONNECT (or CONNECTED) first.
func (p *pipe) forwardReadAhead(dst net.Conn) error {
	r := p.src.r
	if r == nil {
		return nil
	}
	p.src.r = nil
	k := r.Buffered()
	if k == 0 {
		return nil
	}
	head, _ := r.Peek(k)
	if _, err := dst.Write(head); err != nil {
		return err
	}
	p.count(0, k)
	return nil
}

// drainTo splices n bytes out of sp into the socket behind wc, waiting for it to be
// writable as needed (backpressure: until then, the source is not read).
func drainTo(wc syscall.RawConn, sp *splicePipe, n int) error {
	var outErr error
	err := wc.Write(func(fd uintptr) bool {
		for n > 0 {
			k, err := syscall.Splice(sp.r, nil, int(fd), nil, n, spliceFlags)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return false
			case err != nil:
				outErr = os.NewSyscallError("splice", err)
				return true
			}
			n -= int(k)
		}
		return true
	})
	if err != nil {
		return err
	}
	return outErr
}

const spliceFlags = 0x1 | 0x2 // SPLICE_F_MOVE | SPLICE_F_NONBLOCK

// splicePipe is a kernel pipe used as the in-kernel buffer between two sockets.
type splicePipe struct{ r, w int }

func (sp *splicePipe) close() {
	syscall.Close(sp.r)
	syscall.Close(sp.w)
}

// splicePipes keeps a few empty pipes for reuse: making one costs two system calls and two
// descriptors, and most sessions need one only for a moment at a time. Beyond the bound,
// pipes are closed rather than kept.
var splicePipes = struct {
	sync.Mutex
	free []*splicePipe
	held int // out of the free list, for tests: an idle session holds none
}{}

const maxFreeSplicePipes = 64

func getSplicePipe() (*splicePipe, error) {
	splicePipes.Lock()
	defer splicePipes.Unlock()
	if n := len(splicePipes.free); n > 0 {
		sp := splicePipes.free[n-1]
		splicePipes.free = splicePipes.free[:n-1]
		splicePipes.held++
		return sp, nil
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	splicePipes.held++
	return &splicePipe{r: fds[0], w: fds[1]}, nil
}

// discardSplicePipe closes a pipe that may still hold bytes.
func discardSplicePipe(sp *splicePipe) {
	splicePipes.Lock()
	splicePipes.held--
	splicePipes.Unlock()
	sp.close()
}

// putSplicePipe returns an empty pipe (nil: nothing to return).
func putSplicePipe(sp *splicePipe) {
	if sp == nil {
		return
	}
	splicePipes.Lock()
	defer splicePipes.Unlock()
	splicePipes.held--
	if len(splicePipes.free) < maxFreeSplicePipes {
		splicePipes.free = append(splicePipes.free, sp)
		return
	}
	sp.close()
}
