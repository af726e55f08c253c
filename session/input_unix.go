//go:build unix

package session

import "syscall"

// inputReady is called by the runtime's poller with a client socket's descriptor: it peeks
// at one byte without taking it and reports whether the wait is over (something to read, or
// an end or error that the read that follows reports). The peek is one system call more per
// burst of commands than a blocking read; lookup-mode commands are few, idle time is long.
func inputReady(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != syscall.EINTR {
			return err != syscall.EAGAIN
		}
	}
}
