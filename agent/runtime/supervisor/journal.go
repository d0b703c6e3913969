package supervisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The journal is how the processes' output leaves the guest: every line
// the log files get also goes into a bounded ring in memory, numbered,
// and a follow request (OpFollow) streams the ring from a sequence
// number on, then new lines as they come. The agent keeps one follow open
// per guest and stores what it reads on the node (agent/logs); the log
// files stay in the guest for whoever looks there.
//
// The ring holds the last journalRecords lines (journalBytes at most): a
// reader away for longer (the agent restarting under a noisy process)
// is told it missed lines (Gap) and goes on from the oldest kept. The
// epoch names this supervisor's run: sequence numbers restart with it.
const (
	journalRecords = 20000
	journalBytes   = 8 << 20
)

// Record is one line of a process's output, or a line the supervisor
// says about a process ("[corpus] exited ...").
type Record struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"t"`
	Project string    `json:"project"`
	Gen     string    `json:"gen"`
	Name    string    `json:"name"`
	PID     int       `json:"pid,omitempty"`
	Line    string    `json:"line"`
}

// FollowHeader is the first line of a follow stream.
type FollowHeader struct {
	Epoch string `json:"epoch"`
	// Gap is true when lines after the asked sequence number are gone:
	// another epoch, or older than the ring keeps.
	Gap bool `json:"gap,omitempty"`
	// Error refuses the request.
	Error string `json:"error,omitempty"`
}

type journal struct {
	epoch string

	mu      sync.Mutex
	recs    []Record // ring, oldest first from start
	start   int
	bytes   int
	next    uint64        // the next record's Seq
	changed chan struct{} // closed and replaced on every add
}

func newJournal() *journal {
	b := make([]byte, 8)
	rand.Read(b)
	return &journal{epoch: hex.EncodeToString(b), next: 1, changed: make(chan struct{})}
}

// recSize is what a record counts for against journalBytes.
func recSize(r Record) int { return len(r.Line) + len(r.Name) + len(r.Project) + len(r.Gen) + 64 }

func (j *journal) add(r Record) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r.Seq = j.next
	j.next++
	size := recSize(r)
	// The oldest go until the new one fits.
	for len(j.recs) > j.start && (len(j.recs)-j.start >= journalRecords || j.bytes+size > journalBytes) {
		j.bytes -= recSize(j.recs[j.start])
		j.recs[j.start] = Record{}
		j.start++
	}
	if j.start > 0 && j.start >= len(j.recs)/2 {
		n := copy(j.recs, j.recs[j.start:])
		clear(j.recs[n:])
		j.recs, j.start = j.recs[:n], 0
	}
	j.recs = append(j.recs, r)
	j.bytes += size
	close(j.changed)
	j.changed = make(chan struct{})
}

// since returns the records after seq (at most max), whether some were
// lost, and a channel closed at the next add.
func (j *journal) since(seq uint64, max int) (recs []Record, gap bool, changed <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	live := j.recs[j.start:]
	i := 0
	if len(live) > 0 {
		first := live[0].Seq
		switch {
		case seq+1 < first:
			gap = true
		case seq >= first:
			i = int(seq - first + 1)
		}
	} else if seq+1 < j.next {
		gap = true
	}
	if i > len(live) {
		i = len(live)
	}
	end := min(len(live), i+max)
	return append([]Record(nil), live[i:end]...), gap, j.changed
}

// follow streams the journal to c: a FollowHeader, then records after
// req.After (of req.Epoch), then new ones until req.For passes (0: until
// the reader goes away).
func (s *Supervisor) follow(c net.Conn, req Request) {
	w := bufio.NewWriter(c)
	enc := json.NewEncoder(w)
	after := req.After
	gapped := false
	if req.Epoch != s.journal.epoch {
		after, gapped = 0, req.Epoch != ""
	}
	var deadline <-chan time.Time
	if req.For > 0 {
		t := time.NewTimer(time.Duration(req.For))
		defer t.Stop()
		deadline = t.C
	}
	// A reader that goes away is noticed by a read returning.
	gone := make(chan struct{})
	go func() {
		var b [1]byte
		c.Read(b[:])
		close(gone)
	}()
	recs, gap, changed := s.journal.since(after, 512)
	if err := enc.Encode(FollowHeader{Epoch: s.journal.epoch, Gap: gap || gapped}); err != nil {
		return
	}
	for {
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return
			}
			after = r.Seq
		}
		if len(recs) > 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
		if len(recs) == 0 {
			if err := w.Flush(); err != nil {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				return
			case <-gone:
				return
			}
		}
		recs, _, changed = s.journal.since(after, 512)
	}
}

// Follow sends a follow request to the supervisor on socket and copies
// the stream to w until it ends (req.For passed, or ctx ended).
func Follow(ctx context.Context, socket string, req Request, w io.Writer) error {
	req.Op = OpFollow
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("the supervisor does not answer: %w", err)
	}
	defer c.Close()
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	_, err = io.Copy(w, c)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
