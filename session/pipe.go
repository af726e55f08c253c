package session

import (
	"bufio"
	"errors"
	"io"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
)

// pipe forwards whole frames from src to dst until src ends. It returns io.EOF when src
// ended cleanly on a frame boundary. Frames are checked (header and size limit) before a
// byte of them is written, never decoded. Small frames are batched in one write while more
// input is already buffered; a frame larger than the read buffer has its buffered head
// written and its remainder copied socket to socket (splice(2) between TCP sockets).
// Memory is the fixed read and write buffers: a slow dst blocks this loop, which stops
// reading src, so backpressure reaches the sender.
type pipe struct {
	src    *wire
	dst    net.Conn
	frames prometheus.Counter
	bytes  prometheus.Counter

	// totals for the session summary, owned by this pipe's goroutine until it returns
	totalFrames, totalBytes uint64
}

func (p *pipe) run() error {
	w := bufio.NewWriterSize(p.dst, readBufferSize)
	var frames, bytes uint64
	flush := func() error {
		err := w.Flush()
		if frames > 0 {
			p.frames.Add(float64(frames))
			p.bytes.Add(float64(bytes))
			p.totalFrames += frames
			p.totalBytes += bytes
			frames, bytes = 0, 0
		}
		return err
	}
	r := p.src.r
	for {
		if r.Buffered() < frame.HeaderSize {
			if err := flush(); err != nil {
				return err
			}
		}
		hdr, err := r.Peek(frame.HeaderSize)
		if err != nil {
			if len(hdr) == 0 && errors.Is(err, io.EOF) {
				return flushThen(flush, io.EOF)
			}
			return flushThen(flush, eofIsUnexpected(err))
		}
		total, _, err := frame.ParseHeader(hdr, p.src.maxFrame)
		if err != nil {
			return flushThen(flush, err)
		}
		n := 4 + int(total)
		if n <= r.Size() {
			if r.Buffered() < n {
				if err := flush(); err != nil {
					return err
				}
			}
			b, err := r.Peek(n)
			if err != nil {
				return flushThen(flush, eofIsUnexpected(err))
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
			r.Discard(n)
		} else {
			if err := flush(); err != nil {
				return err
			}
			head, _ := r.Peek(r.Buffered())
			if _, err := p.dst.Write(head); err != nil {
				return err
			}
			r.Discard(len(head))
			if _, err := io.CopyN(p.dst, p.src.conn, int64(n-len(head))); err != nil {
				return eofIsUnexpected(err)
			}
		}
		frames++
		bytes += uint64(n)
	}
}

func flushThen(flush func() error, err error) error {
	if ferr := flush(); ferr != nil && errors.Is(err, io.EOF) {
		return ferr
	}
	return err
}

// closeWrite half-closes c where the transport supports it, so the far side sees EOF
// while its answers can still flow back.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
