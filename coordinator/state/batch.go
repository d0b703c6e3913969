package state

import (
	"fmt"
	"time"

	"corpus/coordinator/compat"
	corpusv1 "corpus/proto/corpus/v1"
)

// Batch entries: several commands in one Raft entry (group commit, as
// etcd batches proposals). Each command applies as if it were an entry of
// its own, at the batch's index; package groupcommit gathers them.

// EncodeBatch marshals commands already stamped by Encode as one batch
// entry, stamped itself with now. It is for a group whose cluster version
// allows batches (compat.BatchedEntries); Gate says so of the entry.
func EncodeBatch(cmds []*corpusv1.Command, now time.Time) ([]byte, error) {
	return Encode(BatchCommand(cmds), now)
}

// BatchCommand is the batch entry holding cmds, unstamped.
func BatchCommand(cmds []*corpusv1.Command) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_Batch{Batch: &corpusv1.Batch{Commands: cmds}}}
}

// applyBatch applies the commands of the batch entry cmd at index in
// order, each in a transaction of its own: a business error refuses
// that command alone and leaves the others standing. The entry's index
// row is written once, after them all, so a watcher of the index (a
// blocking query, an agent's watch) wakes once and reads the batch whole.
// A batch the cluster version does not allow refuses all its commands,
// as any replica that knows the kind refuses it.
func (f *FSM) applyBatch(index uint64, cmd *corpusv1.Command, b *corpusv1.Batch) []*Result {
	out := make([]*Result, len(b.Commands))
	refused := compat.Gate(f.store.Read().ClusterVersion(), cmd)
	changed := false
	for i, c := range b.Commands {
		pos := uint32(i)
		switch {
		case refused != nil:
			out[i] = f.refuse(index, pos, c, fmt.Errorf("%w: %w", ErrBadTransition, refused))
		case c.GetBatch() != nil:
			out[i] = f.refuse(index, pos, c, fmt.Errorf("a batch entry holds a batch: %w", ErrInvalid))
		default:
			res, ch := f.applyOne(index, pos, c, false)
			out[i], changed = res, changed || ch
		}
	}
	if changed || index%100 == 0 {
		txn := f.store.Write()
		a := applier{txn: txn, index: index}
		if changed {
			a.entryApplied()
		} else {
			a.trimAudit()
		}
		txn.Commit()
	}
	return out
}

// refuse records cmd, refused with err before it applied, in the audit
// log.
func (f *FSM) refuse(index uint64, position uint32, cmd *corpusv1.Command, err error) *Result {
	f.audit(index, position, cmd, f.clusterTime(cmd.Now), err, false)
	return &Result{Index: index, Err: err}
}
