//go:build !unix

package connlimit

// OpenFilesLimit is 0 (no limit known) where there is no RLIMIT_NOFILE.
func OpenFilesLimit() uint64 { return 0 }
