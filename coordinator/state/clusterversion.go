package state

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"corpus/coordinator/compat"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// The cluster version in the state machine: the entry that raises it,
// the gate on entry kinds and derived state, and the refusals of what
// this binary cannot apply (package compat explains the scheme).

// needs is the release that introduced cmd's kind ("" for the first).
func needs(cmd *corpusv1.Command) string {
	if f, ok := compat.EntryFeature(compat.Kind(cmd)); ok && !compat.Since(f).IsZero() {
		return compat.Since(f).String()
	}
	return ""
}

// unknownEntry is the message of a replica stopping on an entry it
// cannot apply: its kind (the field number, when this binary does not
// know it) and the release that can.
func unknownEntry(index uint64, cmd *corpusv1.Command) string {
	kind := "no kind"
	if cmd.Version > CommandVersion {
		kind = fmt.Sprintf("version %d", cmd.Version)
	} else if unknown := cmd.ProtoReflect().GetUnknown(); len(unknown) > 0 {
		if num, _, n := protowire.ConsumeTag(unknown); n > 0 {
			kind = fmt.Sprintf("Command field %d, a kind this replica does not know", num)
		}
	}
	can := "a newer corpus"
	if cmd.Needs != "" {
		can = "corpus " + cmd.Needs + " or later"
	}
	return fmt.Sprintf("state: unknown command at index %d (%s); it needs %s and this replica is %s: upgrade this replica", index, kind, can, compat.Current)
}

// allows reports whether the state as the command sees it allows f.
func (a *applier) allows(f compat.Feature) bool {
	return compat.Allows(a.view().ClusterVersion(), f)
}

// gated refuses, as a business error, an entry whose kind the cluster
// version does not allow yet: the leader's gate should have kept it out
// of the log, and replicas that know the kind all refuse it alike.
func (a *applier) gated(cmd *corpusv1.Command) error {
	if _, ok := compat.EntryFeature(compat.Kind(cmd)); !ok {
		return nil // a kind of the first release: no state to read
	}
	if err := compat.Gate(a.view().ClusterVersion(), cmd); err != nil {
		return fmt.Errorf("%w: %w", ErrBadTransition, err)
	}
	return nil
}

// setClusterVersion raises the cluster version. Lowering it is refused;
// a version newer than this binary stops the replica: it could not apply
// what the group may now write.
func (a *applier) setClusterVersion(c *corpusv1.SetClusterVersion) error {
	v, err := compat.Parse(c.Version)
	if err != nil || v.IsZero() {
		return fmt.Errorf("cluster version %q: %w", c.Version, ErrInvalid)
	}
	old := a.view().ClusterVersion()
	switch {
	case v == old:
		return nil
	case v.Less(old):
		return fmt.Errorf("cluster version %s is lower than the group's %s; it never goes down: %w", v, old, ErrBadTransition)
	case compat.Current.Less(v):
		panic("state: " + compat.TooOld(v))
	}
	a.put(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaClusterVersion, Value: v})
	if !compat.Allows(old, compat.GuestIDRanges) && compat.Allows(v, compat.GuestIDRanges) {
		for _, n := range a.view().Nodes() {
			a.giveIDRanges(n)
		}
	}
	return nil
}

// checkSnapshot refuses a snapshot this binary cannot restore: a newer
// format, or a group whose cluster version is past this binary.
func checkSnapshot(snap *corpusv1.Snapshot) (compat.Version, error) {
	if snap.Version > CommandVersion {
		return compat.Version{}, fmt.Errorf("snapshot format version %d is newer than this replica reads (%d): it was written by a newer corpus; run that release or later", snap.Version, CommandVersion)
	}
	cv, err := compat.Parse(snap.ClusterVersion)
	if err != nil {
		return compat.Version{}, fmt.Errorf("snapshot's cluster version: %w", err)
	}
	if compat.Current.Less(cv) {
		return compat.Version{}, fmt.Errorf("restoring snapshot: %s", compat.TooOld(cv))
	}
	return cv, nil
}

// Refused is why the last Restore refused its snapshot (nil when it did
// not): Raft, failing to start on it, says only that no snapshot loaded.
func (f *FSM) Refused() error { return f.refused }
