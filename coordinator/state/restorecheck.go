package state

import corpusv1 "corpus/proto/corpus/v1"

// CheckSnapshot is nil when this binary can restore snap, else why not (a
// newer format, a cluster version past this binary): what Restore checks,
// for a restore from a snapshot file to check before writing anything.
func CheckSnapshot(snap *corpusv1.Snapshot) error {
	_, err := checkSnapshot(snap)
	return err
}
