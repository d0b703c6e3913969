package guests_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"corpus/agent/cache"
	"corpus/agent/guests"
	"corpus/drivers"
	"corpus/drivers/fakedriver"
)

// converging is the fake driver with Capabilities.Converge, as the
// kubernetes driver has it.
type converging struct{ *fakedriver.Driver }

func (c converging) Capabilities() drivers.Capabilities {
	caps := c.Driver.Capabilities()
	caps.Converge = true
	return caps
}

// together is the fake driver whose Destroy returns only once `want`
// destroys are in flight at the same time (or ctx ends, failing them).
type together struct {
	*fakedriver.Driver
	want int

	mu      sync.Mutex
	waiting int
	all     chan struct{}
}

func (d *together) Destroy(ctx context.Context, name string) error {
	d.mu.Lock()
	if d.waiting++; d.waiting == d.want {
		close(d.all)
	}
	d.mu.Unlock()
	select {
	case <-d.all:
		return d.Driver.Destroy(ctx, name)
	case <-ctx.Done():
		return errors.New("destroys ran one at a time")
	}
}

func journalOf(t *testing.T) *cache.Cache {
	t.Helper()
	c, err := cache.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// interrupted makes the guest in d and leaves its create in the journal,
// as an agent killed in the middle of the create does.
func interrupted(t *testing.T, j *cache.Cache, d drivers.Driver, id, name string) {
	t.Helper()
	if err := d.Create(context.Background(), drivers.GuestSpec{ID: id, Name: name, Image: "busybox"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := j.Begin(cache.Entry{GuestID: id, GuestName: name, Driver: d.Name(), Op: "create", Started: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverJournal: after a crash, the remains of the creates of a
// driver that does not converge are removed, all at once rather than one
// after another, and those of a converging driver are kept for its
// workers to finish; every entry leaves the journal.
func TestRecoverJournal(t *testing.T) {
	j := journalOf(t)
	plain := &together{Driver: fakedriver.New("plain", "busybox"), want: 3, all: make(chan struct{})}
	conv := converging{fakedriver.New("conv", "busybox")}
	for _, g := range []string{"a", "b", "c"} {
		interrupted(t, j, plain, "id-"+g, g)
	}
	interrupted(t, j, conv, "id-d", "d")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &guests.Config{Journal: j, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Drivers: map[string]drivers.Driver{"plain": plain, "conv": conv}}
	if err := c.RecoverJournal(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"a", "b", "c"} {
		if _, ok := plain.Guest(g); ok {
			t.Errorf("%s: the remains of its create are still there", g)
		}
	}
	if _, ok := conv.Guest("d"); !ok {
		t.Error("d: a converging driver's guest was removed; its worker finishes it")
	}
	for _, call := range conv.Calls() {
		if call.Op == "destroy" {
			t.Errorf("converging driver called: %v", call)
		}
	}
	if left, err := j.Journal(); err != nil || len(left) != 0 {
		t.Errorf("journal after recovery: %v, %v; want empty", left, err)
	}
}

// TestRecoverJournalKeepsWhatItCouldNotRemove: a removal that fails
// leaves its entry for the next start, and is reported; the others are
// settled.
func TestRecoverJournalKeepsWhatItCouldNotRemove(t *testing.T) {
	j := journalOf(t)
	bad, good := fakedriver.New("bad", "busybox"), fakedriver.New("good", "busybox")
	interrupted(t, j, bad, "id-x", "x")
	interrupted(t, j, good, "id-y", "y")
	bad.Fail("destroy", errors.New("engine down"))
	c := &guests.Config{Journal: j, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Drivers: map[string]drivers.Driver{"bad": bad, "good": good}}
	err := c.RecoverJournal(context.Background())
	if err == nil {
		t.Fatal("a failed removal was not reported")
	}
	left, jerr := j.Journal()
	if jerr != nil {
		t.Fatal(jerr)
	}
	if len(left) != 1 || left[0].GuestName != "x" {
		t.Errorf("journal after recovery: %+v; want x's create only", left)
	}
	if _, ok := good.Guest("y"); ok {
		t.Error("y: not removed")
	}
}
