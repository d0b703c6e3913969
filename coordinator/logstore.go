package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"corpus/coordinator/compat"
	"corpus/internal/atomicfile"
)

// A replica's Raft log and stable store (its term and vote) live in a
// write-ahead log of segment files (hashicorp/raft-wal) in <raft>/wal:
// an append is written and synced once. Earlier versions kept them in a
// bbolt file, <raft>/raft.db, whose commit syncs twice (pages, then
// meta) and rewrites pages of a B-tree; the leader writes each entry
// before it replicates it, and each follower before it answers, so those
// syncs were most of a write's latency (test/bench/raft: one client, 228
// against 567 writes/s on the same machine).
//
// A replica of an earlier version keeps its bbolt log until its group's
// cluster version allows the move (compat.LogWAL): before that it may
// still go back to the earlier release, which reads only bbolt. Once the
// group allows it, the replica leaves a mark (walNext) and moves its log
// at its next start: it copies it into wal.tmp, renamed to wal when
// complete (an interrupted copy is made again). raft.db then becomes a
// folder, as it is for a replica made by this version: an earlier corpus
// cannot open it and refuses to start, where it would otherwise make an
// empty log and forget the term and vote this replica gave.

const (
	walDir  = "wal"
	boltLog = "raft.db"
	walNext = "wal-next"
	// raftDir is the Raft folder in a coordinator's data folder.
	raftDir = "raft"
	// walSegmentSize is the size of a WAL segment file, allocated when
	// the segment begins: entries here are small, and test groups make
	// many replicas (raft-wal's default is 64 MiB).
	walSegmentSize = 16 << 20
)

// logStore is what Raft keeps on a replica's disk besides snapshots.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// openLogStore opens the log store in the replica's Raft folder dir: the
// bbolt log of an earlier version while its group may still go back to
// that version, otherwise the write-ahead log, moving a bbolt log into
// it first.
func openLogStore(dir string, logger hclog.Logger) (logStore, error) {
	if onBolt(dir) {
		if _, err := os.Stat(filepath.Join(dir, walNext)); err != nil {
			return raftboltdb.NewBoltStore(filepath.Join(dir, boltLog))
		}
		if err := migrateBoltLog(dir, logger); err != nil {
			return nil, fmt.Errorf("moving the raft log to %s: %w", walDir, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, walDir), 0o700); err != nil {
		return nil, err
	}
	w, err := openWAL(filepath.Join(dir, walDir), logger)
	if err != nil {
		return nil, err
	}
	if err := guardBoltLog(dir); err != nil {
		w.Close()
		return nil, err
	}
	if err := os.Remove(filepath.Join(dir, walNext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.Close()
		return nil, err
	}
	return w, nil
}

// onBolt says whether the Raft folder dir holds a bbolt log not yet
// moved into the write-ahead log.
func onBolt(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, boltLog))
	return err == nil && fi.Mode().IsRegular()
}

// markWALNext asks the next start to move dir's bbolt log into the
// write-ahead log.
func markWALNext(dir string) error {
	return os.WriteFile(filepath.Join(dir, walNext), []byte("the next start moves raft.db into wal\n"), 0o600)
}

// wal is raft-wal's store with its metadata database, which the WAL's
// own Close leaves open (and locked: a replica opened again in the same
// process would wait for the lock for ever).
type wal struct {
	*raftwal.WAL
	meta *metadb.BoltMetaDB
}

func (w *wal) Close() error {
	err := w.WAL.Close()
	if cerr := w.meta.Close(); err == nil {
		err = cerr
	}
	return err
}

func openWAL(dir string, logger hclog.Logger) (*wal, error) {
	meta := &metadb.BoltMetaDB{}
	w, err := raftwal.Open(dir, raftwal.WithMetaStore(meta), raftwal.WithSegmentSize(walSegmentSize), raftwal.WithLogger(logger.Named("wal")))
	if err != nil {
		meta.Close()
		return nil, err
	}
	return &wal{WAL: w, meta: meta}, nil
}

// hasRaftState says whether the Raft folder dir holds a replica's log,
// of this version or an earlier one.
func hasRaftState(dir string) bool {
	if onBolt(dir) {
		return true
	}
	_, err := os.Stat(filepath.Join(dir, walDir))
	return err == nil
}

// stableKeys are the keys hashicorp/raft keeps in its stable store: the
// current term and the last vote, as numbers and as a server address.
var (
	stableUint64 = []string{"CurrentTerm", "LastVoteTerm"}
	stableBytes  = []string{"LastVoteCand"}
)

// migrateBoltLog copies the bbolt log in dir into the WAL, unless the WAL
// is made already.
func migrateBoltLog(dir string, logger hclog.Logger) error {
	bolt := filepath.Join(dir, boltLog)
	if _, err := os.Stat(filepath.Join(dir, walDir)); err == nil {
		return nil // copied; the guard replaces the file
	}
	tmp := filepath.Join(dir, walDir+".tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	src, err := raftboltdb.NewBoltStore(bolt)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := openWAL(tmp, logger)
	if err != nil {
		return err
	}
	n, err := copyLog(src, dst)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, walDir)); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	logger.Info("moved the raft log to a write-ahead log", "entries", n, "from", bolt)
	return nil
}

// copyLog copies src's stable keys and entries into dst, and returns how
// many entries it copied.
func copyLog(src *raftboltdb.BoltStore, dst logStore) (int, error) {
	for _, k := range stableUint64 {
		v, err := src.GetUint64([]byte(k))
		if err != nil {
			continue // never set
		}
		if err := dst.SetUint64([]byte(k), v); err != nil {
			return 0, err
		}
	}
	for _, k := range stableBytes {
		v, err := src.Get([]byte(k))
		if err != nil || len(v) == 0 {
			continue
		}
		if err := dst.Set([]byte(k), v); err != nil {
			return 0, err
		}
	}
	first, err := src.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := src.LastIndex()
	if err != nil {
		return 0, err
	}
	if last == 0 {
		return 0, nil
	}
	n := 0
	batch := make([]*raft.Log, 0, 512)
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return n, fmt.Errorf("reading entry %d: %w", i, err)
		}
		batch = append(batch, l)
		if len(batch) == cap(batch) || i == last {
			if err := dst.StoreLogs(batch); err != nil {
				return n, fmt.Errorf("writing entries up to %d: %w", i, err)
			}
			n += len(batch)
			batch = batch[:0]
		}
	}
	return n, nil
}

// guardReadme is what the folder that replaces the bbolt log says.
const guardReadme = `This replica's Raft log is in ../wal (a write-ahead log).

This folder stands where earlier corpus versions kept their log (a bbolt
file), so that such a version refuses to start here instead of starting
with an empty log, which would forget this replica's term and vote. To go
back to an earlier version, restore a snapshot into an empty data folder.
`

// guardBoltLog makes raft.db a folder, replacing a bbolt log already
// copied into the WAL.
func guardBoltLog(dir string) error {
	bolt := filepath.Join(dir, boltLog)
	if fi, err := os.Stat(bolt); err == nil && fi.IsDir() {
		return nil
	}
	if err := os.Remove(bolt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Mkdir(bolt, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.WriteFile(filepath.Join(bolt, "README"), []byte(guardReadme), 0o600)
}

// walLoop leaves the mark that moves this replica's bbolt log into the
// write-ahead log at its next start, once the group's cluster version
// allows it (compat.LogWAL). A replica on the write-ahead log has
// nothing to do.
func (s *Server) walLoop(ctx context.Context) {
	dir := filepath.Join(s.cfg.DataDir, raftDir)
	if !onBolt(dir) {
		return
	}
	for {
		v := s.store.Read()
		if compat.Allows(v.ClusterVersion(), compat.LogWAL) {
			if err := markWALNext(dir); err != nil {
				s.logger.Warn("marking the raft log for its move to a write-ahead log", "error", err)
				return
			}
			s.logger.Info("the group's cluster version allows a write-ahead raft log: this replica moves its log there at its next start")
			return
		}
		if v.Wait(ctx) != nil {
			return
		}
	}
}
