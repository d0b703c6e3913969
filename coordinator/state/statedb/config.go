package statedb

import (
	corpusv1 "corpus/proto/corpus/v1"
)

// Keyring returns the cluster's keyring, nil before the first config
// value was set.
func (v *Snap) Keyring() *corpusv1.Keyring {
	ch, raw, err := v.txn.FirstWatch(TableMeta, "id", MetaKeyring)
	if err != nil {
		return nil
	}
	v.ws.Add(ch)
	if raw == nil {
		return nil
	}
	return raw.(*Meta).Value.(*corpusv1.Keyring)
}
