//go:build !linux

package idlewait

// epoll: without it, nothing is parked (New fails) and owners wait on goroutines.
type epoll struct{}

// New fails: waiting for many sockets at once is implemented for Linux only.
func New() (*Poller, error) { return nil, errUnsupported }

func (*epoll) arm(int, uint64, bool) error { return errUnsupported }

func (*epoll) stop() {}
