// Package logs keeps the node's log of each guest: the output of its
// processes (collected from the guest's supervisor), of its deploys, and
// what corpus says about it, as time-stamped lines in capped, rotated
// files under the agent's state folder. It is the one store every
// reader uses (corpus logs, the dashboard, shipping): lines are written
// once and read by any number of followers.
//
// Each guest has a folder of segment files of JSON lines, named by a
// growing number. A segment is closed at Config.SegmentBytes; the oldest
// go when the guest's segments pass Config.MaxBytes, or when their last
// line is older than Config.Retention. A line longer than MaxLine is cut
// and says so. Writes are appended without fsync: an agent crash loses at
// most what the kernel had not written, and the supervisor in the guest
// still has it (the collector starts again from the last line stored).
//
// Store.Keep runs a collector per running project guest and a console
// tail per guest that has one; Reader serves the agent's Logs call.
package logs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sources of lines.
const (
	SourceApp    = "app"    // the processes' output
	SourceDeploy = "deploy" // the deploy pipeline's steps
	SourceSystem = "system" // what corpus and the guest's system say
)

// MaxLine bounds a stored line.
const MaxLine = 16 << 10

// Entry is one stored line.
type Entry struct {
	Time    time.Time `json:"t"`
	Source  string    `json:"src"`
	Process string    `json:"proc,omitempty"`
	Release string    `json:"rel,omitempty"`
	Line    string    `json:"line"`
	// Epoch and Seq are where an app line came from in the guest's
	// supervisor, so collection goes on after it (see Collector).
	Epoch string `json:"ep,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
}

// Config sets the store up.
type Config struct {
	// Dir holds one folder per guest.
	Dir string
	// MaxBytes caps each guest's log (default 32 MiB).
	MaxBytes int64
	// SegmentBytes is the size at which a segment is closed (default
	// MaxBytes/8).
	SegmentBytes int64
	// Retention drops segments whose last line is older (default 7
	// days; negative keeps them until MaxBytes).
	Retention time.Duration
	Logger    *slog.Logger
}

// Store is the node's logs.
type Store struct {
	cfg Config

	mu     sync.Mutex
	guests map[string]*guestLog
	ship   func(id string, es []Entry) // set by ShipTo
}

// ShipTo hands every line stored from now on to sh as well.
func (s *Store) ShipTo(sh *Shipper) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ship = sh.Ship
}

type guestLog struct {
	dir string

	mu      sync.Mutex
	segs    []uint64 // segment numbers, oldest first
	f       *os.File // the last segment, open for appending
	size    int64    // of the last segment
	total   int64    // of all segments
	changed chan struct{}
}

// Open opens the store in cfg.Dir, making it when missing.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 32 << 20
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = max(cfg.MaxBytes/8, 64<<10)
	}
	if cfg.Retention == 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("log store: %w", err)
	}
	return &Store{cfg: cfg, guests: map[string]*guestLog{}}, nil
}

// guest returns the log of guest id, reading its folder the first time.
func (s *Store) guest(id string) (*guestLog, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return nil, fmt.Errorf("log store: bad guest id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.guests[id]; g != nil {
		return g, nil
	}
	g := &guestLog{dir: filepath.Join(s.cfg.Dir, id), changed: make(chan struct{})}
	ents, err := os.ReadDir(g.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if n, ok := segNumber(e.Name()); ok {
			g.segs = append(g.segs, n)
			if fi, err := e.Info(); err == nil {
				g.total += fi.Size()
			}
		}
	}
	slices.Sort(g.segs)
	s.guests[id] = g
	return g, nil
}

func segName(n uint64) string { return fmt.Sprintf("%016d.jsonl", n) }

func segNumber(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, ".jsonl")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(base, 10, 64)
	return n, err == nil
}

// Append stores entries of guest id, in order.
func (s *Store) Append(id string, entries ...Entry) error {
	if len(entries) == 0 {
		return nil
	}
	g, err := s.guest(id)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	stored := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if len(e.Line) > MaxLine {
			e.Line = e.Line[:MaxLine] + " [line cut at 16 KiB]"
		}
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		e.Time = e.Time.UTC()
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
		stored = append(stored, e)
	}
	s.mu.Lock()
	ship := s.ship
	s.mu.Unlock()
	if ship != nil {
		defer func() { ship(id, stored) }()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f == nil || g.size >= s.cfg.SegmentBytes {
		if err := s.rollLocked(g); err != nil {
			return err
		}
	}
	n, err := g.f.Write(buf.Bytes())
	g.size += int64(n)
	g.total += int64(n)
	close(g.changed)
	g.changed = make(chan struct{})
	if err != nil {
		return fmt.Errorf("log store: %w", err)
	}
	return nil
}

// rollLocked opens a new last segment (or the existing last one, when
// it has room) and drops what the caps and retention say must go.
func (s *Store) rollLocked(g *guestLog) error {
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return fmt.Errorf("log store: %w", err)
	}
	if g.f != nil {
		g.f.Close()
		g.f = nil
	}
	next := uint64(1)
	if len(g.segs) > 0 {
		last := g.segs[len(g.segs)-1]
		if fi, err := os.Stat(filepath.Join(g.dir, segName(last))); err == nil && fi.Size() < s.cfg.SegmentBytes {
			next = last // an agent restarted: go on in it
		} else {
			next = last + 1
		}
	}
	f, err := os.OpenFile(filepath.Join(g.dir, segName(next)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("log store: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	g.f, g.size = f, fi.Size()
	if len(g.segs) == 0 || g.segs[len(g.segs)-1] != next {
		g.segs = append(g.segs, next)
	}
	// Caps: the oldest segments go while the rest is over MaxBytes (the
	// new one always stays), or while their last line is too old.
	for len(g.segs) > 1 {
		oldest := filepath.Join(g.dir, segName(g.segs[0]))
		fi, err := os.Stat(oldest)
		expired := err == nil && s.cfg.Retention > 0 && time.Since(fi.ModTime()) > s.cfg.Retention
		if err == nil && g.total <= s.cfg.MaxBytes-s.cfg.SegmentBytes && !expired {
			break
		}
		if err == nil {
			g.total -= fi.Size()
		}
		os.Remove(oldest)
		g.segs = g.segs[1:]
	}
	return nil
}

// Guests lists the ids of the guests with a log.
func (s *Store) Guests() []string {
	ents, _ := os.ReadDir(s.cfg.Dir)
	var ids []string
	for _, e := range ents {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// Delete removes the log of guest id.
func (s *Store) Delete(id string) error {
	g, err := s.guest(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.guests, id)
	s.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f != nil {
		g.f.Close()
		g.f = nil
	}
	close(g.changed)
	g.changed = make(chan struct{})
	return os.RemoveAll(g.dir)
}

// Cursor is a position in a guest's log: a segment and an offset in it.
type Cursor struct {
	Seg uint64
	Off int64
}

// Query filters what Read and Follow return.
type Query struct {
	Sources []string // every source when empty
	Process string   // every process when empty
	Since   time.Time
	// Tail is how many of the last matching lines Read returns (0: all).
	Tail int
}

func (q Query) match(e Entry) bool {
	return (len(q.Sources) == 0 || slices.Contains(q.Sources, e.Source)) &&
		(q.Process == "" || e.Process == q.Process) &&
		(q.Since.IsZero() || !e.Time.Before(q.Since))
}

// Read returns the stored lines of guest id that q matches, oldest
// first, and the cursor after the last line stored.
func (s *Store) Read(id string, q Query) ([]Entry, Cursor, error) {
	g, err := s.guest(id)
	if err != nil {
		return nil, Cursor{}, err
	}
	g.mu.Lock()
	segs := slices.Clone(g.segs)
	end := Cursor{}
	if len(segs) > 0 {
		end = Cursor{Seg: segs[len(segs)-1], Off: g.size}
		if g.f == nil {
			if fi, err := os.Stat(filepath.Join(g.dir, segName(end.Seg))); err == nil {
				end.Off = fi.Size()
			}
		}
	}
	g.mu.Unlock()
	// Newest segment first, until Tail lines are found.
	var chunks [][]Entry
	found := 0
	for i := len(segs) - 1; i >= 0; i-- {
		limit := int64(-1)
		if segs[i] == end.Seg {
			limit = end.Off
		}
		es, _, err := readSeg(filepath.Join(g.dir, segName(segs[i])), 0, limit, q)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // dropped meanwhile
			}
			return nil, end, err
		}
		chunks = append(chunks, es)
		found += len(es)
		if q.Tail > 0 && found >= q.Tail {
			break
		}
		if !q.Since.IsZero() {
			if fi, err := os.Stat(filepath.Join(g.dir, segName(segs[i]))); err == nil && fi.ModTime().Before(q.Since) {
				break
			}
		}
	}
	var out []Entry
	for i := len(chunks) - 1; i >= 0; i-- {
		out = append(out, chunks[i]...)
	}
	if q.Tail > 0 && len(out) > q.Tail {
		out = out[len(out)-q.Tail:]
	}
	return out, end, nil
}

// After returns the lines of guest id stored after c that q matches (at
// most about max), the cursor after them, and a channel closed at the
// next Append. A cursor whose segment was dropped goes on at the oldest
// kept.
func (s *Store) After(id string, c Cursor, q Query, max int) ([]Entry, Cursor, <-chan struct{}, error) {
	g, err := s.guest(id)
	if err != nil {
		return nil, c, nil, err
	}
	g.mu.Lock()
	segs := slices.Clone(g.segs)
	changed := g.changed
	lastSize := int64(-1) // nobody writes: to its end
	if g.f != nil {
		lastSize = g.size
	}
	g.mu.Unlock()
	var out []Entry
	for _, n := range segs {
		if n < c.Seg {
			continue
		}
		if n > c.Seg {
			c = Cursor{Seg: n}
		}
		limit := int64(-1)
		if n == segs[len(segs)-1] {
			limit = lastSize
		}
		es, off, err := readSeg(filepath.Join(g.dir, segName(n)), c.Off, limit, q)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, c, changed, err
		}
		out = append(out, es...)
		c.Off = off
		if len(out) >= max {
			break
		}
	}
	return out, c, changed, nil
}

// readSeg reads the entries of a segment from off up to limit (-1: the
// end), keeping those q matches, and returns the offset after the last
// whole line.
func readSeg(path string, off, limit int64, q Query) ([]Entry, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, off, err
	}
	defer f.Close()
	if _, err := f.Seek(off, 0); err != nil {
		return nil, off, err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var out []Entry
	for limit < 0 || off < limit {
		line, err := br.ReadBytes('\n')
		if err != nil {
			break // a partial last line is read next time
		}
		off += int64(len(line))
		var e Entry
		if json.Unmarshal(line, &e) == nil && q.match(e) {
			out = append(out, e)
		}
	}
	return out, off, nil
}

// LastApp returns the newest app line of guest id that came from the
// supervisor (with its Epoch and Seq): where collection goes on.
func (s *Store) LastApp(id string) (Entry, bool) { return s.last(id, SourceApp, "") }

// last returns the newest line of guest id from source whose Epoch is
// set and starts with prefix.
func (s *Store) last(id, source, prefix string) (Entry, bool) {
	g, err := s.guest(id)
	if err != nil {
		return Entry{}, false
	}
	g.mu.Lock()
	segs := slices.Clone(g.segs)
	g.mu.Unlock()
	for i := len(segs) - 1; i >= 0; i-- {
		es, _, err := readSeg(filepath.Join(g.dir, segName(segs[i])), 0, -1, Query{Sources: []string{source}})
		if err != nil {
			continue
		}
		for j := len(es) - 1; j >= 0; j-- {
			if es[j].Epoch != "" && strings.HasPrefix(es[j].Epoch, prefix) {
				return es[j], true
			}
		}
	}
	return Entry{}, false
}

// Prune drops, in every guest's log, the segments whose last line is
// older than the retention (the one being written stays).
func (s *Store) Prune() {
	if s.cfg.Retention <= 0 {
		return
	}
	ents, _ := os.ReadDir(s.cfg.Dir)
	for _, e := range ents {
		g, err := s.guest(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		g.mu.Lock()
		for len(g.segs) > 1 || (len(g.segs) == 1 && g.f == nil) {
			p := filepath.Join(g.dir, segName(g.segs[0]))
			fi, err := os.Stat(p)
			if err == nil && time.Since(fi.ModTime()) <= s.cfg.Retention {
				break
			}
			if err == nil {
				g.total -= fi.Size()
			}
			os.Remove(p)
			g.segs = g.segs[1:]
		}
		g.mu.Unlock()
	}
}

// Close closes the open segments.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.guests {
		g.mu.Lock()
		if g.f != nil {
			g.f.Close()
			g.f = nil
		}
		g.mu.Unlock()
	}
}
