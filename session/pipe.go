package session

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// sink is the write side of one socket in direct mode. Forwarded frames and frames the proxy
// itself injects (answers to commands it refuses) both go through it, a whole frame at a time
// under mu, so they never interleave mid-frame.
type sink struct {
	mu   sync.Mutex
	conn net.Conn
	w    *bufio.Writer
}

func newSink(c net.Conn) *sink {
	return &sink{conn: c, w: bufio.NewWriterSize(c, readBufferSize)}
}

// inject writes one command frame and flushes it.
func (s *sink) inject(cmd *pb.BaseCommand) error {
	b, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.w.Flush()
}

// filterFunc sees the command of every forwarded frame (not its payload) and reports whether
// the frame goes on. It may inject an answer into either sink. It runs on the pipe's
// goroutine, so it must not block for long.
type filterFunc func(t pb.BaseCommand_Type, command []byte) (forward bool)

// pipe forwards whole frames from src to dst until src ends. It returns io.EOF when src
// ended cleanly on a frame boundary. Frames are checked (header and size limit) before a
// byte of them is written, never decoded. Small frames are batched in one write while more
// input is already buffered; a frame larger than the read buffer has its buffered head
// written and its remainder copied socket to socket (splice(2) between TCP sockets).
// Memory is the fixed read and write buffers: a slow dst blocks this loop, which stops
// reading src, so backpressure reaches the sender.
type pipe struct {
	src    *wire
	dst    *sink
	filter filterFunc // nil: forward everything without looking
	frames prometheus.Counter
	bytes  prometheus.Counter

	// totals for the session summary, owned by this pipe's goroutine until it returns
	totalFrames, totalBytes uint64
}

func (p *pipe) run() error {
	var frames, bytes uint64
	flush := func() error {
		p.dst.mu.Lock()
		err := p.dst.w.Flush()
		p.dst.mu.Unlock()
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
		total, cmdSize, err := frame.ParseHeader(hdr, p.src.maxFrame)
		if err != nil {
			return flushThen(flush, err)
		}
		n := 4 + int(total)
		if p.filter != nil {
			forward, err := p.applyFilter(int(cmdSize), flush)
			if err != nil {
				return flushThen(flush, err)
			}
			if !forward {
				if _, err := r.Discard(n); err != nil {
					return flushThen(flush, eofIsUnexpected(err))
				}
				continue
			}
		}
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
			p.dst.mu.Lock()
			_, err = p.dst.w.Write(b)
			p.dst.mu.Unlock()
			if err != nil {
				return err
			}
			r.Discard(n)
		} else if err := p.stream(n, flush); err != nil {
			return err
		}
		frames++
		bytes += uint64(n)
	}
}

// stream forwards a frame larger than the read buffer: the buffered head, then the rest
// straight from socket to socket, holding the sink so nothing is injected mid-frame.
func (p *pipe) stream(n int, flush func() error) error {
	if err := flush(); err != nil {
		return err
	}
	r := p.src.r
	p.dst.mu.Lock()
	defer p.dst.mu.Unlock()
	head, _ := r.Peek(r.Buffered())
	if _, err := p.dst.conn.Write(head); err != nil {
		return err
	}
	r.Discard(len(head))
	if _, err := io.CopyN(p.dst.conn, p.src.conn, int64(n-len(head))); err != nil {
		return eofIsUnexpected(err)
	}
	return nil
}

// applyFilter peeks the frame's command and asks the filter about it.
func (p *pipe) applyFilter(cmdSize int, flush func() error) (bool, error) {
	r := p.src.r
	end := frame.HeaderSize + cmdSize
	if end > r.Size() {
		return false, errCommandTooLarge
	}
	if r.Buffered() < end {
		if err := flush(); err != nil {
			return false, err
		}
	}
	b, err := r.Peek(end)
	if err != nil {
		return false, eofIsUnexpected(err)
	}
	cmd := b[frame.HeaderSize:]
	t, err := frame.PeekType(cmd)
	if err != nil {
		return false, err
	}
	return p.filter(t, cmd), nil
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
