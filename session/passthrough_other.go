//go:build !linux

package session

import "net"

// canPassthrough: splice(2) is Linux's; elsewhere every direction is forwarded frame by frame.
const canPassthrough = false

func (p *pipe) passthrough(src, dst *net.TCPConn) error { panic("passthrough without splice") }

// splicer: no passthrough state without splice(2).
type splicer struct{}

func (p *pipe) splicing() error { panic("passthrough without splice") }

func (p *pipe) spliceRest(n int64) error { panic("splice without splice(2)") }
