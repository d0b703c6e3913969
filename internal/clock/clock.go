// Package clock is the wall clock as a dependency.
//
// Code that decides by the time of day reads a Clock: when a token or a
// session expires, whether a certificate is valid or due for renewal,
// when a backup is due, the time a Raft entry is stamped with. Tests and
// fault runs move it. Durations, timeouts and deadlines (heartbeat
// deadlines, Raft's timers, retries) stay on time.Now and time.Since,
// whose monotonic reading no step of the wall clock moves; a moved Clock
// carries no monotonic reading, so code that measured a duration with it
// would see the step, as it would see a real one.
package clock

import (
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Clock tells the time of day.
type Clock interface {
	Now() time.Time
}

// Func adapts a function to a Clock.
type Func func() time.Time

// Now calls f.
func (f Func) Now() time.Time { return f() }

type system struct{}

func (system) Now() time.Time { return time.Now() }

// System is the process's clock: time.Now, unless the process was
// started with CORPUS_FAILPOINT_CLOCK naming a file (fault injection,
// as the failpoint package's CORPUS_FAILPOINTS). Then the file holds an
// offset in Go's duration syntax ("90m", "-1h"; empty or missing: none),
// read again every 100 ms, and System is time.Now moved by it: a clock
// stepped by that much, for this process alone.
var System Clock = system{}

// Or returns c, or System when c is nil: the default of a component's
// Clock field.
func Or(c Clock) Clock {
	if c == nil {
		return System
	}
	return c
}

// Offset is a clock a settable offset away from time.Now: the clock of
// tests, and of CORPUS_FAILPOINT_CLOCK. Its zero value is time.Now
// (without a monotonic reading).
type Offset struct{ d atomic.Int64 }

// Now is time.Now moved by the offset, without a monotonic reading.
func (o *Offset) Now() time.Time { return time.Now().Round(0).Add(o.Get()) }

// Set steps the clock to d from time.Now.
func (o *Offset) Set(d time.Duration) { o.d.Store(int64(d)) }

// Add steps the clock by d.
func (o *Offset) Add(d time.Duration) { o.d.Add(int64(d)) }

// Get is the offset.
func (o *Offset) Get() time.Duration { return time.Duration(o.d.Load()) }

func init() {
	if path := os.Getenv("CORPUS_FAILPOINT_CLOCK"); path != "" {
		o := &Offset{}
		if d, ok := readOffset(path); ok {
			o.Set(d)
		}
		System = o
		go follow(o, path)
	}
}

// follow keeps o at the offset the file says.
func follow(o *Offset, path string) {
	for range time.Tick(100 * time.Millisecond) {
		if d, ok := readOffset(path); ok && d != o.Get() {
			slog.Warn("failpoint: clock stepped", "offset", d, "by", d-o.Get())
			o.Set(d)
		}
	}
}

// readOffset reads the offset the file says; not ok (keep the clock as it
// is) when the file does not parse.
func readOffset(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, true
	}
	if err != nil {
		slog.Warn("failpoint: reading the clock file", "error", err)
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, true
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		slog.Warn("failpoint: clock file is not a duration", "file", path, "error", err)
		return 0, false
	}
	return d, true
}
