package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
)

// The agent's volumes: each volume of this node exists on the host and is
// mounted under <state>/volumes/mnt/NAME while it is present; guests get
// their volume bound in at that path. Volumes the coordinator never told
// about are left alone: data is never removed unless asked.

func (a *Agent) volumeMount(name string) string {
	return filepath.Join(a.cfg.StateDir, "volumes", "mnt", name)
}

// reconcileVolumes makes this node's volumes exist and be mounted, removes
// those being deleted, and records what it observes for the next report.
func (a *Agent) reconcileVolumes(ctx context.Context) {
	a.mu.Lock()
	vols := append([]*corpusv1.Volume(nil), a.volumes...)
	live := map[string]bool{}
	for _, v := range vols {
		live[v.Id] = true
	}
	for id := range a.volObserved {
		if !live[id] {
			delete(a.volObserved, id)
		}
	}
	a.mu.Unlock()
	for _, v := range vols {
		o := a.reconcileVolume(ctx, v)
		a.mu.Lock()
		prev := a.volObserved[v.Id]
		a.volObserved[v.Id] = o
		a.mu.Unlock()
		if prev == nil || prev.State != o.State || prev.Message != o.Message || prev.UsedBytes != o.UsedBytes || prev.SizeBytes != o.SizeBytes {
			a.poke(a.report)
		}
	}
}

func (a *Agent) reconcileVolume(ctx context.Context, v *corpusv1.Volume) *corpusv1.VolumeObserved {
	if a.vols == nil {
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: "volumes are not available on this node"}
	}
	if v.DesiredState == "deleted" {
		err := a.vols.Delete(ctx, v.Name, true)
		if err != nil && !errors.Is(err, volume.ErrNotFound) {
			return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
		}
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedDeleted}
	}
	if _, err := a.mountVolume(ctx, v); err != nil {
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
	}
	info, err := a.vols.Stat(ctx, v.Name)
	if err != nil {
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
	}
	return &corpusv1.VolumeObserved{State: "ready", SizeBytes: info.SizeBytes, UsedBytes: info.UsedBytes, FreeBytes: info.FreeBytes}
}

// mountVolume makes a volume exist and be mounted; it returns the mount.
func (a *Agent) mountVolume(ctx context.Context, v *corpusv1.Volume) (string, error) {
	if a.vols == nil {
		return "", errors.New("volumes are not available on this node")
	}
	err := a.vols.Create(ctx, v.Name, v.SizeBytes)
	if err != nil && !errors.Is(err, volume.ErrExists) {
		return "", fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	target := a.volumeMount(v.Name)
	if err := a.vols.Mount(ctx, v.Name, target); err != nil {
		return "", fmt.Errorf("mounting volume %s: %w", v.Name, err)
	}
	return target, nil
}

// guestMounts returns the volume mount of guest g, mounting it first.
func (a *Agent) guestMounts(ctx context.Context, g *corpusv1.Guest) ([]drivers.Mount, error) {
	vs := g.GetSpec().GetVolume()
	if vs == nil {
		return nil, nil
	}
	a.mu.Lock()
	var v *corpusv1.Volume
	for _, cand := range a.volumes {
		if cand.GuestId == g.Id {
			v = cand
		}
	}
	a.mu.Unlock()
	if v == nil {
		return nil, fmt.Errorf("the volume of guest %s is not on this node yet", g.Name)
	}
	src, err := a.mountVolume(ctx, v)
	if err != nil {
		return nil, err
	}
	return []drivers.Mount{{Source: src, Target: vs.Path}}, nil
}
