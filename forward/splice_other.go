//go:build !linux

package forward

import "net"

// canPassthrough: splice(2) is Linux's; elsewhere every direction is forwarded frame by frame.
const canPassthrough = false

// CanPassthrough: see splice_linux.go.
const CanPassthrough = canPassthrough

func (p *Pipe) passthrough(src, dst *net.TCPConn) error { panic("passthrough without splice") }

// splicer: no passthrough state without splice(2).
type splicer struct{}

func (p *Pipe) splicing() error { panic("passthrough without splice") }

func (p *Pipe) spliceRest(n int64) error { panic("splice without splice(2)") }

// splicePipes: no kernel pipes to keep without splice(2).
type splicePipes struct{}
