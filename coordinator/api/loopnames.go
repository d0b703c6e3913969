package api

import (
	"context"
	"time"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// The leader loops of this package (autoscale.go, backupschedule.go,
// series.go) call these by the names they had; they go when the loops
// move to their own packages.

func toConnect(err error) error { return ToConnect(err) }

func invalidf(format string, args ...any) error { return Invalidf(format, args...) }

func (b *Backend) now() time.Time { return b.Now() }

func (b *Backend) write(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	return b.Write(ctx, cmd)
}

func waitFor(seconds int64) time.Duration { return WaitFor(seconds) }

func volumeBackup(view *state.Snap, v *corpusv1.Volume, trigger string) (*corpusv1.Backup, *corpusv1.Node, error) {
	return VolumeBackup(view, v, trigger)
}
