package logs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func TestReadFilterTail(t *testing.T) {
	t.Parallel()
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	for i := range 10 {
		src, proc := SourceApp, "web"
		if i%3 == 0 {
			src, proc = SourceDeploy, ""
		} else if i%3 == 1 {
			proc = "worker"
		}
		if err := s.Append("g1", Entry{Time: t0.Add(time.Duration(i) * time.Second), Source: src, Process: proc, Line: fmt.Sprint("line ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	all, end, err := s.Read("g1", Query{})
	if err != nil || len(all) != 10 || all[0].Line != "line 0" || all[9].Line != "line 9" {
		t.Fatalf("Read = %v, %d lines", err, len(all))
	}
	web, _, _ := s.Read("g1", Query{Sources: []string{SourceApp}, Process: "web"})
	tail, _, _ := s.Read("g1", Query{Tail: 2})
	since, _, _ := s.Read("g1", Query{Since: t0.Add(8 * time.Second)})
	if len(web) != 3 || web[0].Line != "line 2" || len(tail) != 2 || tail[1].Line != "line 9" || len(since) != 2 {
		t.Errorf("web %v, tail %v, since %v", web, tail, since)
	}
	// After the end cursor: only what comes next.
	es, _, changed, err := s.After("g1", end, Query{}, 100)
	if err != nil || len(es) != 0 {
		t.Fatalf("After(end) = %v, %v", es, err)
	}
	s.Append("g1", Entry{Source: SourceApp, Process: "web", Line: "new"})
	select {
	case <-changed:
	default:
		t.Fatal("Append did not signal")
	}
	es, _, _, _ = s.After("g1", end, Query{}, 100)
	if len(es) != 1 || es[0].Line != "new" {
		t.Errorf("After(end) after an append = %v", es)
	}
	// A long line is cut.
	s.Append("g1", Entry{Source: SourceApp, Line: strings.Repeat("x", MaxLine+10)})
	last, _, _ := s.Read("g1", Query{Tail: 1})
	if !strings.HasSuffix(last[0].Line, "[line cut at 16 KiB]") || len(last[0].Line) > MaxLine+40 {
		t.Errorf("a long line is stored as %d bytes", len(last[0].Line))
	}
	if _, _, err := s.Read("../x", Query{}); err == nil {
		t.Error("Read accepted a guest id with a path")
	}
}

// TestCapAndReopen: a guest printing far more than the cap keeps at most
// the cap on disk, the newest lines; a reopened store reads them, and
// a follower's cursor goes on across rotations.
func TestCapAndReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Dir: dir, MaxBytes: 256 << 10, SegmentBytes: 32 << 10}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, cur, _ := s.Read("g1", Query{})
	line := strings.Repeat("z", 200)
	followed := 0
	for i := range 20000 {
		if err := s.Append("g1", Entry{Source: SourceApp, Process: "web", Line: fmt.Sprintf("%06d %s", i, line), Epoch: "e1", Seq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			var es []Entry
			es, cur, _, _ = s.After("g1", cur, Query{}, 1<<20)
			followed += len(es)
		}
	}
	if n := dirSize(t, dir); n > cfg.MaxBytes+cfg.SegmentBytes {
		t.Errorf("%d bytes on disk for a cap of %d", n, cfg.MaxBytes)
	}
	es, _, _, _ := s.After("g1", cur, Query{}, 1<<20)
	if followed += len(es); followed != 20000 {
		t.Errorf("a follower reading every 500 lines got %d of 20000", followed)
	}
	s.Close()
	s2, _ := Open(cfg)
	es, _, err = s2.Read("g1", Query{Tail: 1})
	if err != nil || len(es) != 1 || !strings.HasPrefix(es[0].Line, "019999 ") {
		t.Fatalf("after reopening: %v, %v", es, err)
	}
	if last, ok := s2.LastApp("g1"); !ok || last.Seq != 20000 || last.Epoch != "e1" {
		t.Errorf("LastApp = %+v, %v", last, ok)
	}
	s2.Append("g1", Entry{Source: SourceDeploy, Line: "after reopening"})
	if es, _, _ := s2.Read("g1", Query{Tail: 2}); len(es) != 2 || es[1].Line != "after reopening" || !strings.HasPrefix(es[0].Line, "019999 ") {
		t.Errorf("tail after reopening: %v", es)
	}
	if err := s2.Delete("g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "g1")); !os.IsNotExist(err) {
		t.Errorf("Delete left the folder: %v", err)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, _ := Open(Config{Dir: dir, MaxBytes: 1 << 20, SegmentBytes: 1 << 10, Retention: time.Hour})
	for i := range 100 {
		s.Append("g1", Entry{Source: SourceApp, Line: fmt.Sprint(i, strings.Repeat("a", 100))})
	}
	old := time.Now().Add(-2 * time.Hour)
	segs, _ := filepath.Glob(filepath.Join(dir, "g1", "*.jsonl"))
	for _, p := range segs[:len(segs)-1] {
		os.Chtimes(p, old, old)
	}
	s.Prune()
	left, _ := filepath.Glob(filepath.Join(dir, "g1", "*.jsonl"))
	if len(segs) < 3 || len(left) != 1 {
		t.Errorf("%d segments, %d left after pruning the expired ones", len(segs), len(left))
	}
}
