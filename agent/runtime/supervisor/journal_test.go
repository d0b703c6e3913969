package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestJournalRing(t *testing.T) {
	t.Parallel()
	j := newJournal()
	for i := range journalRecords + 10 {
		j.add(Record{Name: "web", Line: strings.Repeat("x", i%7)})
	}
	recs, gap, _ := j.since(0, 1<<30)
	if !gap || len(recs) != journalRecords || recs[0].Seq != 11 || recs[len(recs)-1].Seq != journalRecords+10 {
		t.Fatalf("since(0): gap %v, %d records, %d..%d", gap, len(recs), recs[0].Seq, recs[len(recs)-1].Seq)
	}
	recs, gap, _ = j.since(journalRecords+5, 100)
	if gap || len(recs) != 5 || recs[0].Seq != journalRecords+6 {
		t.Fatalf("since(last-5): gap %v, %+v", gap, recs)
	}
	// Bytes bound the ring as well: a few huge lines push the rest out.
	big := strings.Repeat("y", journalBytes/4)
	for range 8 {
		j.add(Record{Name: "web", Line: big})
	}
	recs, _, _ = j.since(0, 1<<30)
	total := 0
	for _, r := range recs {
		total += recSize(r)
	}
	if total > journalBytes || len(recs) > 4 {
		t.Errorf("ring holds %d records, %d bytes; limit %d bytes", len(recs), total, journalBytes)
	}
}

// TestFollow streams a process's output from a running supervisor: the
// lines so far, new ones as they come, and again from a cursor; another
// epoch's cursor says lines were missed.
func TestFollow(t *testing.T) {
	s, dir := newTest(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sock := filepath.Join(dir, "s.sock")
	go s.Serve(ctx, sock, filepath.Join(dir, "s.lock"))
	waitFor(t, "the socket", func() bool {
		_, err := Call(ctx, sock, Request{Op: OpPing})
		return err == nil
	})
	g := gen(dir, "r1", Process{Name: "web", Command: `echo one; echo two; sleep 0.5; echo three; exec sleep 60`})
	if res := s.Handle(Request{Op: OpStart, Generation: &g}); res.Error != "" {
		t.Fatal(res.Error)
	}

	pr, pw := io.Pipe()
	fctx, fcancel := context.WithCancel(ctx)
	go func() { pw.CloseWithError(Follow(fctx, sock, Request{}, pw)) }()
	sc := bufio.NewScanner(pr)
	var h FollowHeader
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &h) != nil || h.Epoch == "" || h.Gap {
		t.Fatalf("header %q", sc.Text())
	}
	var got []Record
	for len(got) < 3 && sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	fcancel()
	if len(got) != 3 || got[0].Line != "one" || got[2].Line != "three" || got[2].Name != "web" || got[2].Gen != "r1" || got[2].Project != "site" {
		t.Fatalf("followed %+v", got)
	}

	// From the cursor: nothing old, the stream ends after For.
	var out strings.Builder
	start := time.Now()
	if err := Follow(ctx, sock, Request{Epoch: h.Epoch, After: got[2].Seq, For: Duration(200 * time.Millisecond)}, &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 1 || time.Since(start) < 200*time.Millisecond {
		t.Errorf("follow from the cursor gave %q after %s", lines, time.Since(start))
	}
	out.Reset()
	if err := Follow(ctx, sock, Request{Epoch: "gone", After: 2, For: Duration(100 * time.Millisecond)}, &out); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); !strings.Contains(first, `"gap":true`) || !strings.Contains(out.String(), `"line":"one"`) {
		t.Errorf("follow with another epoch's cursor: %q", out.String())
	}
}
