//go:build !unix

package forward

// useRawReads: without unix read semantics the pipe reads with conn.Read and keeps its
// buffer while it waits.
func (p *Pipe) useRawReads() {}
