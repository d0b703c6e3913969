package deploy

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"corpus/agent/logs"
	corpusv1 "corpus/proto/corpus/v1"
)

// say writes a line of the pipeline's own to the client and the log.
func (d *deploy) say(format string, args ...any) {
	line := fmt.Sprintf(format, args...) + "\n"
	d.sayMu.Lock()
	defer d.sayMu.Unlock()
	d.out.Write([]byte(line))
	d.keep(line)
}

// detach stops sending what the deploy says to its caller (the push's
// hook or the call's stream, which may be gone); the log keeps it.
func (d *deploy) detach() {
	d.sayMu.Lock()
	defer d.sayMu.Unlock()
	d.out = io.Discard
}

// keep records s; the caller holds sayMu.
func (d *deploy) keep(s string) {
	d.deployLine(s)
	d.log.WriteString(s)
	if d.log.Len() > maxLogBytes {
		b := d.log.Bytes()
		cut := len(b) - maxLogBytes/2
		rest := append([]byte("[... earlier output cut ...]\n"), b[cut:]...)
		d.log.Reset()
		d.log.Write(rest)
	}
}

// deployLine stores a line the deploy pipeline says in the guest's log.
func (d *deploy) deployLine(s string) {
	if d.p.logs == nil {
		return
	}
	rel := ""
	if d.release != nil {
		rel = corpusv1.ReleaseName(d.release.Number)
	}
	var es []logs.Entry
	now := time.Now()
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		es = append(es, logs.Entry{Time: now, Source: logs.SourceDeploy, Release: rel, Line: line})
	}
	if err := d.p.logs.Append(d.guest.Id, es...); err != nil {
		d.p.logger.Warn("storing deploy output", "guest", d.guest.Name, "error", err)
	}
}

// stepWriter indents a step's output, keeps its tail and logs it.
type stepWriter struct {
	d       *deploy
	partial []byte
}

func (w *stepWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > 4096 { // a very long line without newline
		w.line(string(w.partial))
		w.partial = nil
	}
	return len(p), nil
}

func (w *stepWriter) flush() {
	if len(w.partial) > 0 {
		w.line(string(w.partial))
		w.partial = nil
	}
}

func (w *stepWriter) line(s string) {
	s = strings.TrimRight(s, "\r")
	w.d.say("       %s", s)
	w.d.tail = append(w.d.tail, s)
	if len(w.d.tail) > tailLines {
		w.d.tail = w.d.tail[len(w.d.tail)-tailLines:]
	}
}

// stepError is a failed step.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
