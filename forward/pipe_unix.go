//go:build unix

package forward

import (
	"io"
	"os"
	"syscall"
)

// useRawReads makes a TCP source read through its descriptor (readRaw), so that the pipe
// can give its buffer back while it waits.
func (p *Pipe) useRawReads() {
	if p.srcTCP == nil {
		return
	}
	if rc, err := p.srcTCP.SyscallConn(); err == nil {
		p.raw = rc
		p.readFn = p.readRaw // bound once: a method value allocates
	}
}

// readRaw is called by the runtime's poller with src's descriptor. When src has nothing to
// read and the buffer holds no partial frame, the buffer goes back to its pool before the
// goroutine parks, so an idle direction of a session holds no buffer at all. It costs no
// extra system call: the read that finds nothing is the one that would have blocked.
func (p *Pipe) readRaw(fd uintptr) bool {
	if p.buf.bytes() == nil {
		p.buffers.get(&p.buf, p.wantLarge)
	}
	into := p.buf.bytes()[p.end:]
	if p.readLimit > 0 && len(into) > p.readLimit {
		into = into[:p.readLimit]
	}
	for {
		n, err := syscall.Read(int(fd), into)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if p.start == p.end {
				p.buffers.put(&p.buf)
				p.reset()
			}
			p.armIdle()
			return false
		case err != nil:
			p.readN, p.readErr = 0, os.NewSyscallError("read", err)
		case n == 0:
			p.readN, p.readErr = 0, io.EOF
		default:
			p.readN, p.readErr = n, nil
		}
		return true
	}
}
