// Package snapshotschedule takes the scheduled snapshots of the control
// plane, as Consul's snapshot agent does: the leader writes one into a
// folder every interval (sealed with the operator's key file, as
// corpus operator snapshot save writes them) and removes the oldest
// beyond the number to keep. Their age, size and duration are metrics; a
// failure is logged, counted and tried again after a retry delay.
package snapshotschedule

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/clock"
	"corpus/internal/snapshotfile"
	corpusv1 "corpus/proto/corpus/v1"
)

// Config says where, how often and with what key snapshots are written.
type Config struct {
	// Dir holds the snapshots; empty turns scheduled snapshots off.
	Dir      string
	Interval time.Duration
	Keep     int
	// KeyFile holds the operator's secret the snapshots are sealed with.
	KeyFile string
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Dir == "" {
		return nil
	}
	if c.KeyFile == "" {
		return fmt.Errorf("--snapshot-dir needs --snapshot-key-file: snapshots are sealed with it")
	}
	if c.Interval < time.Second {
		return fmt.Errorf("snapshot interval %s is below the minimum of 1s", c.Interval)
	}
	if c.Keep < 1 {
		return fmt.Errorf("snapshot keep %d: keep at least 1", c.Keep)
	}
	return nil
}

// Metrics are the scheduled snapshots' figures, registered once per
// replica; the loop of whichever replica leads updates them.
type Metrics struct {
	mu       sync.Mutex
	last     time.Time // the newest snapshot's time (zero: none)
	clock    clock.Clock
	size     prometheus.Gauge
	duration prometheus.Gauge
	failures prometheus.Counter
}

// NewMetrics registers the metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer, c clock.Clock) *Metrics {
	m := &Metrics{
		clock:    clock.Or(c),
		size:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "corpus_snapshot_last_size_bytes", Help: "Size of the newest scheduled snapshot of the control plane."}),
		duration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "corpus_snapshot_last_duration_seconds", Help: "Time the newest scheduled snapshot took to take and write."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "corpus_snapshot_failures_total", Help: "Scheduled snapshots that failed."}),
	}
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corpus_snapshot_age_seconds", Help: "Age of the newest scheduled snapshot in the snapshot folder (-1: none yet)."}, m.age)
	if reg != nil {
		reg.MustRegister(m.size, m.duration, m.failures, age)
	}
	return m
}

func (m *Metrics) age() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last.IsZero() {
		return -1
	}
	return m.clock.Now().Sub(m.last).Seconds()
}

func (m *Metrics) taken(at time.Time, size int64, took time.Duration) {
	m.mu.Lock()
	m.last = at
	m.mu.Unlock()
	m.size.Set(float64(size))
	m.duration.Set(took.Seconds())
}

// Loop writes the snapshots while this replica leads.
type Loop struct {
	Config
	// Take takes a snapshot on the leader.
	Take    func(ctx context.Context) (*snapshotfile.Taken, error)
	Clock   clock.Clock
	Metrics *Metrics
	Logger  *slog.Logger
	// Retry is how long a failed snapshot waits to be tried again (0:
	// a tenth of the interval, at least a second).
	Retry time.Duration
}

// suffix ends the names of the files the loop writes (and removes).
const suffix = ".snap"

// Run writes a snapshot whenever the newest in Dir is Interval old, until
// ctx ends.
func (l *Loop) Run(ctx context.Context) {
	if l.Dir == "" {
		return
	}
	logger := l.Logger.With("component", "snapshots")
	c := clock.Or(l.Clock)
	retry := l.Retry
	if retry <= 0 {
		retry = max(l.Interval/10, time.Second)
	}
	for {
		wait := l.Interval
		files, newest, err := l.list()
		if err != nil {
			logger.Warn("listing scheduled snapshots", "dir", l.Dir, "error", err)
		}
		if !newest.IsZero() {
			l.Metrics.mu.Lock()
			if newest.After(l.Metrics.last) {
				l.Metrics.last = newest
			}
			l.Metrics.mu.Unlock()
			wait = l.Interval - c.Now().Sub(newest)
		}
		if newest.IsZero() || wait <= 0 {
			if err := l.write(ctx, c); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.Metrics.failures.Inc()
				logger.Error("scheduled snapshot failed", "dir", l.Dir, "retry_in", retry, "error", err)
				wait = retry
			} else {
				wait = l.Interval
				l.prune(logger, files)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// list returns the loop's files in Dir, oldest first, and the newest's
// time.
func (l *Loop) list() ([]string, time.Time, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, time.Time{}, nil
		}
		return nil, time.Time{}, err
	}
	type file struct {
		name string
		mod  time.Time
	}
	var fs []file
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "corpus-") || !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		if info, err := e.Info(); err == nil {
			fs = append(fs, file{e.Name(), info.ModTime()})
		}
	}
	slices.SortFunc(fs, func(a, b file) int { return a.mod.Compare(b.mod) })
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	if len(fs) == 0 {
		return nil, time.Time{}, nil
	}
	return names, fs[len(fs)-1].mod, nil
}

// write takes a snapshot and writes it into Dir.
func (l *Loop) write(ctx context.Context, c clock.Clock) error {
	start := time.Now()
	secret, err := snapshotfile.ReadSecret(l.KeyFile)
	if err != nil {
		return err
	}
	key, err := snapshotfile.NewKey(secret)
	if err != nil {
		return err
	}
	t, err := l.Take(ctx)
	if err != nil {
		return err
	}
	now := c.Now()
	h, err := snapshotfile.NewHeader(t.Index, t.Term, t.State, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return err
	}
	name := fmt.Sprintf("corpus-%s-%s-%d%s", h.ClusterId, now.UTC().Format("20060102T150405Z"), t.Index, suffix)
	path := filepath.Join(l.Dir, name)
	if err := snapshotfile.WriteFile(path, key, h, &corpusv1.SnapshotContents{State: t.State, CaCert: t.CACert, CaKey: t.CAKey}); err != nil {
		return err
	}
	// The file's time is the snapshot's, on the replica's clock: what
	// the next pass and the age metric go by.
	if err := os.Chtimes(path, now, now); err != nil {
		return err
	}
	l.Metrics.taken(now, int64(h.PayloadSize), time.Since(start))
	l.Logger.Info("scheduled snapshot written", "component", "snapshots", "file", path, "raft_index", t.Index, "bytes", h.PayloadSize)
	return nil
}

// prune removes the oldest of the loop's files beyond Keep (files were
// listed before the newest was written).
func (l *Loop) prune(logger *slog.Logger, before []string) {
	extra := len(before) + 1 - l.Keep
	for i := 0; i < extra && i < len(before); i++ {
		if err := os.Remove(filepath.Join(l.Dir, before[i])); err != nil {
			logger.Warn("removing an old scheduled snapshot", "file", before[i], "error", err)
		}
	}
}
