package logs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// consolePoll is how often a console file is looked at.
const consolePoll = 500 * time.Millisecond

// TailConsole stores the lines a guest's console file gets (source
// "system") until ctx ends, going on from the last one stored: each
// line's Epoch names the file ("console:INODE") and Seq the offset after
// it. A file that was replaced or cut (rotated, a VM started again) is
// read from its start.
func (s *Store) TailConsole(ctx context.Context, id, path string) {
	ino, off := uint64(0), int64(0)
	if last, ok := s.last(id, SourceSystem, "console:"); ok {
		if n, err := strconv.ParseUint(strings.TrimPrefix(last.Epoch, "console:"), 10, 64); err == nil {
			ino, off = n, int64(last.Seq)
		}
	}
	var partial []byte
	var partialAt time.Time
	t := time.NewTicker(consolePoll)
	defer t.Stop()
	for {
		if f, err := os.Open(path); err == nil {
			var st syscall.Stat_t
			if syscall.Fstat(int(f.Fd()), &st) == nil {
				if st.Ino != ino || st.Size < off {
					ino, off, partial = st.Ino, 0, nil
				}
				if st.Size > off {
					had := len(partial)
					off, partial = s.readConsole(id, f, ino, off, partial)
					if len(partial) > 0 && (had == 0 || len(partial) < had) {
						partialAt = time.Now()
					}
				}
			}
			f.Close()
		}
		// A line left unfinished (a prompt) is stored after a second.
		if len(partial) > 0 && time.Since(partialAt) > time.Second {
			if text := consoleText(partial); text != "" {
				s.Append(id, Entry{Source: SourceSystem, Line: text, Epoch: fmt.Sprintf("console:%d", ino), Seq: uint64(off)})
			}
			partial = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readConsole stores the whole lines of f from off on and returns the
// offset after them, with the start of an unfinished line.
func (s *Store) readConsole(id string, f *os.File, ino uint64, off int64, partial []byte) (int64, []byte) {
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off, partial
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil || len(b) == 0 {
		return off, partial
	}
	epoch := fmt.Sprintf("console:%d", ino)
	var es []Entry
	now := time.Now()
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(partial)+len(b) > MaxLine {
				i = len(b) // a line too long: stored as it is
			} else {
				partial = append(partial, b...)
				off += int64(len(b))
				break
			}
		}
		line := append(partial, b[:i]...)
		partial = nil
		n := i + 1
		if i == len(b) {
			n = i
		}
		off += int64(n)
		b = b[n:]
		if text := consoleText(line); text != "" {
			es = append(es, Entry{Time: now, Source: SourceSystem, Line: text, Epoch: epoch, Seq: uint64(off)})
		}
	}
	if err := s.Append(id, es...); err != nil {
		s.cfg.Logger.Warn("storing a guest's console lines", "guest", id, "error", err)
	}
	return off, partial
}

// consoleText is a console line as text: carriage returns and terminal
// control sequences go, invalid UTF-8 is replaced.
func consoleText(b []byte) string {
	var out strings.Builder
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == 0x1b: // ESC [ ... final byte, or ESC and one more
			if i+1 < len(b) && b[i+1] == '[' {
				i += 2
				for i < len(b) && (b[i] < 0x40 || b[i] > 0x7e) {
					i++
				}
			} else {
				i++
			}
		case c == '\t' || c >= 0x20 && c != 0x7f:
			out.WriteByte(c)
		}
	}
	return strings.TrimSpace(strings.ToValidUTF8(out.String(), "\uFFFD"))
}
