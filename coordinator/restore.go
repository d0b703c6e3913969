package coordinator

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/secret"
	"corpus/internal/snapshotfile"
	corpusv1 "corpus/proto/corpus/v1"
)

// Disaster recovery: a replica started with --restore on an empty data
// folder installs the snapshot file's cluster CA and state, as a Raft
// snapshot whose configuration is this replica alone, and so starts a new
// group of one from it at the snapshot's index and term. Other replicas
// join it as usual. The replicas the snapshot names are dropped from the
// state (this replica registers itself again), so agents learn only the
// new group's addresses.

// restoring is a snapshot file opened for a restore.
type restoring struct {
	header *corpusv1.SnapshotHeader
	state  []byte
	logger *slog.Logger
}

// ErrRestoreRefused wraps every reason a data folder is not restored into.
var ErrRestoreRefused = errors.New("restore refused")

// openRestore reads and opens the snapshot cfg.RestoreFile names and
// checks the data folder may take it; it writes the snapshot's CA there.
// It returns nil, nil when there is nothing to restore: no file given, or
// the data folder already holds the restored cluster (a restart with the
// same flags). Any refusal happens before anything is written.
func openRestore(cfg Config, logger *slog.Logger) (*restoring, error) {
	if cfg.RestoreFile == "" {
		return nil, nil
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrRestoreRefused, cfg.RestoreFile}, args...)...)
	}
	if cfg.RestoreKeyFile == "" {
		return nil, refuse("give the key file it was saved with (--restore-key-file)")
	}
	key, err := snapshotfile.ReadSecret(cfg.RestoreKeyFile)
	if err != nil {
		return nil, refuse("%w", err)
	}
	h, payload, err := snapshotfile.Read(cfg.RestoreFile)
	if err != nil {
		return nil, refuse("%w", err)
	}
	c, err := snapshotfile.Open(h, payload, key)
	if err != nil {
		return nil, refuse("%w", err)
	}
	st, _, err := decodeSnapshot(h, c)
	if err != nil {
		return nil, refuse("%w", err)
	}
	tlsDir := filepath.Join(cfg.DataDir, TLSDir)
	haveCA, err := os.ReadFile(filepath.Join(tlsDir, CACertFile))
	switch {
	case err == nil && !bytes.Equal(haveCA, c.CaCert):
		return nil, refuse("the data folder %s belongs to another cluster (its CA is not the snapshot's cluster %s CA): restore into an empty data folder", cfg.DataDir, h.ClusterId)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, refuse("reading the data folder's CA: %v", err)
	}
	if fileExists(filepath.Join(cfg.DataDir, "raft", "raft.db")) {
		if haveCA == nil {
			return nil, refuse("the data folder %s holds a replica's Raft state already: restore into an empty data folder", cfg.DataDir)
		}
		logger.Info("the data folder holds this cluster's state already (restored before?): starting from it, not from the snapshot", "cluster_id", h.ClusterId, "snapshot", cfg.RestoreFile)
		return nil, nil
	}
	// The replicas of the lost group are not this one's peers.
	st.Coordinators = nil
	// Agents tell from this what the snapshot predates (agent/orphans.go).
	st.Config.Restore = &corpusv1.Restore{Id: secret.Hex(8), SnapshotIndex: h.RaftIndex}
	state, err := proto.Marshal(st)
	if err != nil {
		return nil, err
	}
	if err := checkRestore(state); err != nil {
		return nil, refuse("%w", err)
	}
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating tls folder: %w", err)
	}
	if err := writeCA(tlsDir, c.CaCert, c.CaKey); err != nil {
		return nil, err
	}
	return &restoring{header: h, state: state, logger: logger}, nil
}

// checkRestore is nil when a replica's state machine takes data (see
// state.CheckRestore), else snapshotfile.ErrCorrupt saying why not.
func checkRestore(data []byte) error {
	if err := state.CheckRestore(data); err != nil {
		return fmt.Errorf("%w: its state does not restore (%v)", snapshotfile.ErrCorrupt, err)
	}
	return nil
}

// decodeSnapshot decodes an opened snapshot file's state and CA, and
// checks this binary can restore them and that they agree with the
// header: what every restore checks before it changes anything.
func decodeSnapshot(h *corpusv1.SnapshotHeader, c *corpusv1.SnapshotContents) (*corpusv1.Snapshot, *pki.CA, error) {
	ca, err := pki.LoadCA(c.CaCert, c.CaKey)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the snapshot's cluster CA: %v", snapshotfile.ErrCorrupt, err)
	}
	st := &corpusv1.Snapshot{}
	if err := proto.Unmarshal(c.State, st); err != nil {
		return nil, nil, fmt.Errorf("%w: the state does not decode (%v)", snapshotfile.ErrCorrupt, err)
	}
	if err := state.CheckSnapshot(st); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", snapshotfile.ErrNewerFormat, err)
	}
	if st.Config.GetClusterId() != h.ClusterId {
		return nil, nil, fmt.Errorf("%w: the state is of cluster %q, the header says %q", snapshotfile.ErrCorrupt, st.Config.GetClusterId(), h.ClusterId)
	}
	return st, ca, nil
}

// install writes the snapshot into a replica's empty Raft storage, with
// this replica (id at trans's address) as the only voter, and its term as
// the current one.
func (r *restoring) install(id raft.ServerID, snaps raft.SnapshotStore, logs *raftboltdb.BoltStore, trans raft.Transport) error {
	h := r.header
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: id, Address: trans.LocalAddr()}}}
	sink, err := snaps.Create(raft.SnapshotVersionMax, h.RaftIndex, h.RaftTerm, conf, h.RaftIndex, trans)
	if err != nil {
		return fmt.Errorf("creating the restored raft snapshot: %w", err)
	}
	if _, err := sink.Write(r.state); err != nil {
		sink.Cancel()
		return fmt.Errorf("writing the restored raft snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("writing the restored raft snapshot: %w", err)
	}
	// Raft's key of the current term in its stable store: entries this
	// replica writes as leader come after the snapshot's term.
	if err := logs.SetUint64([]byte("CurrentTerm"), h.RaftTerm); err != nil {
		return fmt.Errorf("setting the restored term: %w", err)
	}
	r.logger.Info("restored from a snapshot", "cluster_id", h.ClusterId, "raft_index", h.RaftIndex, "raft_term", h.RaftTerm, "taken_by", h.CorpusVersion)
	return nil
}
