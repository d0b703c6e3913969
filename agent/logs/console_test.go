package logs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

func lines(t *testing.T, s *Store, id string) []string {
	t.Helper()
	es, _, err := s.Read(id, Query{Sources: []string{SourceSystem}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Line)
	}
	return out
}

func waitLines(t *testing.T, s *Store, id string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(testrun.D(5 * time.Second))
	for {
		got := lines(t, s, id)
		if strings.Join(got, "|") == strings.Join(want, "|") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("console lines %q, want %q", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTailConsole: console lines are stored as text, once each, across a
// restart of the reader, a rotation and a truncation of the file.
func TestTailConsole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, _ := Open(Config{Dir: filepath.Join(dir, "logs")})
	path := filepath.Join(dir, "console.log")
	appendFile := func(text string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(f, text)
		f.Close()
	}
	appendFile("\x1b[1;32mStarting\x1b[0m init\r\nhalf")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.TailConsole(ctx, "g1", path); close(done) }()
	waitLines(t, s, "g1", "Starting init")
	appendFile(" a line\n")
	waitLines(t, s, "g1", "Starting init", "half a line")
	// A prompt without a newline is stored after a second.
	appendFile("Press Enter: ")
	waitLines(t, s, "g1", "Starting init", "half a line", "Press Enter:")
	cancel()
	<-done

	// Again from where it was: nothing twice.
	appendFile("after restart\n")
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	go s.TailConsole(ctx, "g1", path)
	waitLines(t, s, "g1", "Starting init", "half a line", "Press Enter:", "after restart")
	// Rotated: the new file from its start.
	os.Rename(path, path+".1")
	appendFile("new file\n")
	waitLines(t, s, "g1", "Starting init", "half a line", "Press Enter:", "after restart", "new file")
	// Cut (a VM's console at its next boot).
	os.Truncate(path, 0)
	time.Sleep(2 * consolePoll)
	appendFile("booted again\n")
	waitLines(t, s, "g1", "Starting init", "half a line", "Press Enter:", "after restart", "new file", "booted again")
}
