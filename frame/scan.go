package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DefaultMaxCommandSize is the largest command (the BaseCommand, not the payload) a client
// may send: real commands are a few hundred bytes, a CONNECT with a large token a few KiB,
// and the limit is what a reader of client commands must be ready to buffer. Commands from
// brokers are not capped below the frame limit: a namespace's topic list is one command.
const DefaultMaxCommandSize = 64 << 10

// ErrCommandTooLarge: a command larger than the scanner's MaxCommand.
var ErrCommandTooLarge = errors.New("frame: command too large")

// Limits are what a scanner accepts; a header that breaks them is refused before anything
// is allocated for its frame.
type Limits struct {
	MaxFrame   int // the largest totalSize; <= 0: DefaultMaxFrameSize
	MaxCommand int // the largest commandSize; <= 0: no limit below MaxFrame
}

// ClientLimits are the limits for frames from clients: maxFrame and DefaultMaxCommandSize.
func ClientLimits(maxFrame int) Limits {
	return Limits{MaxFrame: maxFrame, MaxCommand: DefaultMaxCommandSize}
}

// Span is a frame found at the start of a buffer, as its header describes it.
type Span struct {
	Size        int // the whole frame: header, command and payload section
	CommandSize int
}

// CommandEnd is where the command ends, counted from the frame's start.
func (s Span) CommandEnd() int { return HeaderSize + s.CommandSize }

// Command is the frame's command, from a buffer that starts with the frame and holds at
// least CommandEnd bytes.
func (s Span) Command(frame []byte) []byte { return frame[HeaderSize:s.CommandEnd():s.CommandEnd()] }

// Scan is the one reader of frame headers: it looks at the start of buf, the unread bytes
// of a stream, and tells what is there.
//   - complete=false, err=nil: buf holds less than a header; read more.
//   - complete=true: the header is read and checked; the frame is span.Size bytes long and
//     its command ends at span.CommandEnd(). Whether buf already holds those bytes is for
//     the caller, who knows whether it needs the command, the whole frame, or neither.
//   - err: the header breaks a limit (ErrFrameTooLarge, ErrFrameTooSmall,
//     ErrBadCommandSize, ErrCommandTooLarge); the stream cannot go on.
func (l Limits) Scan(buf []byte) (span Span, complete bool, err error) {
	if len(buf) < HeaderSize {
		return Span{}, false, nil
	}
	total, command, err := ParseHeader(buf[:HeaderSize], l.MaxFrame)
	if err != nil {
		return Span{}, false, err
	}
	if l.MaxCommand > 0 && int64(command) > int64(l.MaxCommand) {
		return Span{}, false, fmt.Errorf("%w: %d bytes, limit %d", ErrCommandTooLarge, command, l.MaxCommand)
	}
	return Span{Size: 4 + int(total), CommandSize: int(command)}, true, nil
}

// ParseHeader validates the 8-byte frame header against maxFrameSize (the
// largest acceptable totalSize; <= 0 means DefaultMaxFrameSize) before
// anything is allocated. It returns totalSize (the bytes that follow the
// first 4) and commandSize.
//
// Errors: hdr shorter than HeaderSize or totalSize < 5 (a command size and
// at least one command byte) → ErrFrameTooSmall; totalSize > maxFrameSize →
// ErrFrameTooLarge; commandSize 0 or larger than totalSize-4 →
// ErrBadCommandSize.
func ParseHeader(hdr []byte, maxFrameSize int) (totalSize, commandSize uint32, err error) {
	if len(hdr) < HeaderSize {
		return 0, 0, fmt.Errorf("%w: header is %d bytes, need %d", ErrFrameTooSmall, len(hdr), HeaderSize)
	}
	totalSize = binary.BigEndian.Uint32(hdr)
	commandSize = binary.BigEndian.Uint32(hdr[4:])
	if uint64(totalSize) > uint64(effectiveMax(maxFrameSize)) {
		return 0, 0, fmt.Errorf("%w: total size %d exceeds limit %d", ErrFrameTooLarge, totalSize, effectiveMax(maxFrameSize))
	}
	if totalSize < 4+1 {
		return 0, 0, fmt.Errorf("%w: total size %d", ErrFrameTooSmall, totalSize)
	}
	if commandSize == 0 || commandSize > totalSize-4 {
		return 0, 0, fmt.Errorf("%w: command size %d in a frame of total size %d", ErrBadCommandSize, commandSize, totalSize)
	}
	return totalSize, commandSize, nil
}

// IsFrameError reports whether err is a broken frame (as opposed to a broken connection):
// the peer broke the protocol.
func IsFrameError(err error) bool {
	for _, e := range []error{ErrFrameTooLarge, ErrFrameTooSmall, ErrBadCommandSize, ErrCommandTooLarge, ErrMalformed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
