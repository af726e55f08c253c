//go:build unix

package connlimit

import "golang.org/x/sys/unix"

// OpenFilesLimit is the process's soft limit on open files (RLIMIT_NOFILE), which Go raises to
// the hard limit at start; 0 when there is none or it cannot be read.
func OpenFilesLimit() uint64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return uint64(r.Cur)
}
