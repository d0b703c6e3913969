package state

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state/auditentry"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// The audit log: every applied command leaves an entry saying who asked
// for what and how it ended, refused commands included. It is part of
// the replicated state, so every replica answers the same, and bounded.

// MaxAudit bounds the audit log; the oldest entries go first.
const MaxAudit = 10000

// ActorSystem is the actor of the control plane's own writes.
const ActorSystem = auditentry.ActorSystem

// audit records cmd, which changed nothing, in the audit log alone.
func (f *FSM) audit(index uint64, position uint32, cmd *corpusv1.Command, now *timestamppb.Timestamp, err error, last bool) {
	txn := f.store.Write()
	a := applier{txn: txn, index: index, now: now}
	a.put(statedb.TableAudit, auditentry.Of(cmd, index, position, err))
	if last && index%100 == 0 {
		a.trimAudit()
	}
	txn.Commit()
}

// trimAudit drops the oldest entries beyond MaxAudit.
func (a *applier) trimAudit() {
	it, err := a.txn.Get(statedb.TableAudit, "id")
	if err != nil {
		panic(fmt.Sprintf("state: reading audit: %v", err))
	}
	var all []any
	for raw := it.Next(); raw != nil; raw = it.Next() {
		all = append(all, raw)
	}
	for i := 0; i < len(all)-MaxAudit; i++ {
		if err := a.txn.Delete(statedb.TableAudit, all[i]); err != nil {
			panic(fmt.Sprintf("state: trimming audit: %v", err))
		}
	}
}
