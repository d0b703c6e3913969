package state

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// Volume desired states (the API's words).
const (
	VolumePresent = corpusv1.VolumePresent
	VolumeDeleted = corpusv1.VolumeDeleted
)

// DefaultVolumePath is where a volume appears inside its guest.
const DefaultVolumePath = "/srv/data"

func (a *applier) volume(index, key string) *corpusv1.Volume {
	raw := a.get(statedb.TableVolumes, index, key)
	if raw == nil {
		return nil
	}
	return proto.Clone(raw.(*corpusv1.Volume)).(*corpusv1.Volume)
}

// bindVolume gives a new guest its volume: a new one named after the
// guest, or an existing unbound one (use_volume).
func (a *applier) bindVolume(g *corpusv1.Guest) error {
	vs := g.GetSpec().GetVolume()
	if vs == nil || (vs.SizeBytes == 0 && vs.UseVolume == "") {
		return nil
	}
	var v *corpusv1.Volume
	if vs.UseVolume != "" {
		if v = a.volume("name", vs.UseVolume); v == nil {
			return fmt.Errorf("volume %s: %w", vs.UseVolume, ErrNotFound)
		}
		switch {
		case v.DesiredState == VolumeDeleted:
			return fmt.Errorf("volume %s is being deleted: %w", v.Name, ErrBadTransition)
		case v.GuestId != "":
			return fmt.Errorf("volume %s is used by guest %s: %w", v.Name, v.GuestName, ErrBadTransition)
		}
	} else {
		if a.get(statedb.TableVolumes, "name", g.Name) != nil {
			return fmt.Errorf("a volume named %s already exists; use it with --use-volume or delete it: %w", g.Name, ErrExists)
		}
		v = &corpusv1.Volume{Id: g.Id, Name: g.Name, SizeBytes: vs.SizeBytes, DesiredState: VolumePresent, CreatedAt: a.now, CreateIndex: a.index}
	}
	v.GuestId, v.GuestName = g.Id, g.Name
	v.ModifyIndex = a.index
	a.put(statedb.TableVolumes, v)
	return nil
}

// placeVolume puts a guest's volume on the guest's node, or refuses a node
// other than the one its data is on.
func (a *applier) placeVolume(g *corpusv1.Guest, n *corpusv1.Node) error {
	v := a.volume("guest", g.Id)
	if v == nil {
		return nil
	}
	if v.NodeId != "" && v.NodeId != n.Id {
		return fmt.Errorf("guest %s: its volume %s is on another node: %w", g.Name, v.Name, ErrBadTransition)
	}
	if v.NodeId == "" {
		v.NodeId = n.Id
		v.ModifyIndex = a.index
		a.put(statedb.TableVolumes, v)
	}
	return nil
}

// releaseVolume unbinds a deleted guest's volume, or deletes it when the
// guest was deleted with purge.
func (a *applier) releaseVolume(g *corpusv1.Guest) {
	v := a.volume("guest", g.Id)
	if v == nil {
		return
	}
	v.GuestId, v.GuestName = "", ""
	if g.PurgeVolume {
		if v.NodeId == "" {
			a.del(statedb.TableVolumes, v)
			return
		}
		v.DesiredState = VolumeDeleted
	}
	v.ModifyIndex = a.index
	a.put(statedb.TableVolumes, v)
}

func (a *applier) del(table string, obj any) {
	if err := a.txn.Delete(table, obj); err != nil {
		panic(fmt.Sprintf("state: deleting from %s: %v", table, err))
	}
}

// updateVolume sets a volume's backup schedule.
func (a *applier) updateVolume(c *corpusv1.UpdateVolume) error {
	v := a.volume("name", c.Name)
	if v == nil {
		return fmt.Errorf("volume %s: %w", c.Name, ErrNotFound)
	}
	if err := ValidSchedule(c.BackupSchedule); err != nil {
		return err
	}
	v.BackupSchedule, v.BackupKeep = c.BackupSchedule, c.BackupKeep
	v.ModifyIndex = a.index
	a.put(statedb.TableVolumes, v)
	return nil
}

func (a *applier) deleteVolume(c *corpusv1.DeleteVolume) error {
	v := a.volume("name", c.Name)
	if v == nil {
		return fmt.Errorf("volume %s: %w", c.Name, ErrNotFound)
	}
	if v.GuestId != "" {
		return fmt.Errorf("volume %s is used by guest %s; delete the guest with --purge, or delete it first: %w", v.Name, v.GuestName, ErrBadTransition)
	}
	if v.DesiredState == VolumeDeleted {
		return nil
	}
	if v.NodeId == "" {
		a.del(statedb.TableVolumes, v)
		return nil
	}
	v.DesiredState = VolumeDeleted
	v.ModifyIndex = a.index
	a.put(statedb.TableVolumes, v)
	return nil
}

// reportVolumes records observations of a node's volumes; a deleted
// volume whose agent confirms it is gone leaves the state.
func (a *applier) reportVolumes(c *corpusv1.ReportVolumes) error {
	if _, err := a.node(c.NodeId); err != nil {
		return err
	}
	for _, r := range c.Volumes {
		v := a.volume("id", r.VolumeId)
		if v != nil && r.OldCopyRemoved && v.PreviousNodeId == c.NodeId {
			v.PreviousNodeId = ""
			v.ModifyIndex = a.index
			a.put(statedb.TableVolumes, v)
			continue
		}
		if v == nil || v.NodeId != c.NodeId || r.Observed == nil {
			continue
		}
		if v.DesiredState == VolumeDeleted && r.Observed.State == ObservedDeleted {
			a.del(statedb.TableVolumes, v)
			continue
		}
		if proto.Equal(v.Observed, r.Observed) {
			continue
		}
		v.Observed = r.Observed
		v.ModifyIndex = a.index
		a.put(statedb.TableVolumes, v)
	}
	return nil
}

func (a *applier) resizeVolume(c *corpusv1.ResizeVolume) error {
	v := a.volume("name", c.Name)
	if v == nil {
		return fmt.Errorf("volume %s: %w", c.Name, ErrNotFound)
	}
	if v.DesiredState == VolumeDeleted {
		return fmt.Errorf("volume %s is being deleted: %w", v.Name, ErrBadTransition)
	}
	if c.SizeBytes <= 0 {
		return fmt.Errorf("volume size %d: %w", c.SizeBytes, ErrInvalid)
	}
	if v.SizeBytes == c.SizeBytes {
		return nil
	}
	v.SizeBytes = c.SizeBytes
	v.ModifyIndex = a.index
	a.put(statedb.TableVolumes, v)
	return nil
}

// moveVolume records an unbound volume's data on another node (the API
// copied it there first).
func (a *applier) moveVolume(c *corpusv1.MoveVolume) error {
	v := a.volume("name", c.Name)
	if v == nil {
		return fmt.Errorf("volume %s: %w", c.Name, ErrNotFound)
	}
	if v.GuestId != "" || v.DesiredState == VolumeDeleted {
		return fmt.Errorf("volume %s is bound or being deleted: %w", v.Name, ErrBadTransition)
	}
	if _, err := a.node(c.NodeId); err != nil {
		return err
	}
	if v.NodeId != c.NodeId {
		v.PreviousNodeId = v.NodeId
	}
	v.NodeId = c.NodeId
	v.Observed = nil
	v.ModifyIndex = a.index
	a.put(statedb.TableVolumes, v)
	return nil
}
