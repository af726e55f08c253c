package idlewait

import (
	"os"
	"syscall"
)

// epoll is an epoll set of the proxy's own, holding the parked sockets level-triggered and
// one-shot. Its descriptor is itself waited on by Go's poller (an epoll set is readable
// while it has events), so no thread sits in epoll_wait: the loop is an ordinary goroutine
// that runs when a parked socket has input.
type epoll struct {
	fd   int
	file *os.File // fd, for Go's poller (its Fd method would make it blocking)
	raw  syscall.RawConn
	done chan struct{}
}

// New starts a poller.
func New() (*Poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(fd), "idlewait") // non-blocking: registered with Go's poller
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &Poller{parked: map[uint64]*Waiter{}, epoll: epoll{fd: fd, file: f, raw: raw, done: make(chan struct{})}}
	go p.loop()
	return p, nil
}

const parkEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot

const epollOneShot = 1 << 30 // EPOLLONESHOT

// arm puts fd into the set (again) under token, for one event.
func (e *epoll) arm(fd int, token uint64, added bool) error {
	ev := syscall.EpollEvent{Events: parkEvents, Fd: int32(uint32(token)), Pad: int32(uint32(token >> 32))}
	op := syscall.EPOLL_CTL_ADD
	if added {
		op = syscall.EPOLL_CTL_MOD
	}
	err := syscall.EpollCtl(e.fd, op, fd, &ev)
	if err == syscall.ENOENT && added { // cannot happen while fd stays open; be safe
		err = syscall.EpollCtl(e.fd, syscall.EPOLL_CTL_ADD, fd, &ev)
	}
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// loop takes the set's events as Go's poller reports the set readable, until Close.
func (p *Poller) loop() {
	defer close(p.done)
	defer p.shut() // nothing stays parked on a set that is gone
	var events [128]syscall.EpollEvent
	tokens := make([]uint64, 0, len(events))
	var waitErr error
	take := func(fd uintptr) bool {
		for {
			n, err := syscall.EpollWait(int(fd), events[:], 0)
			switch {
			case err == syscall.EINTR:
				continue
			case err != nil:
				waitErr = os.NewSyscallError("epoll_wait", err)
				return true
			case n == 0:
				return false // drained: the set is edge-triggered in Go's poller
			}
			for _, ev := range events[:n] {
				tokens = append(tokens, uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32)
			}
			return true
		}
	}
	for {
		tokens = tokens[:0]
		if err := p.raw.Read(take); err != nil || waitErr != nil {
			return // closed (or the set broke: parked sockets then wait for their Wake)
		}
		p.ready(tokens)
	}
}

func (e *epoll) stop() {
	e.file.Close() // ends the loop's wait
	<-e.done
}
