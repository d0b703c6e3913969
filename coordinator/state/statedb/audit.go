package statedb

import (
	corpusv1 "corpus/proto/corpus/v1"
)

// Audit returns the audit log, oldest first.
func (v *Snap) Audit() []*corpusv1.AuditEntry {
	return all[*corpusv1.AuditEntry](v, TableAudit, "id")
}
