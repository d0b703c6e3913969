// Package backups is the backup plumbing of the API, which the service
// and volume handlers and the backup schedules share: a backup taken on
// its subject's node, relayed to and kept by another, checked on both
// ends, restored from the newest usable one.
package backups

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"corpus/coordinator/api"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// Backups: the service's agent dumps it (the template's backup script,
// in its guest), this replica relays the dump to the agent of another
// node, which keeps it; a restore relays it back, checked against its
// SHA-256 on both ends. A backup is recorded before it starts and
// finished (succeeded with its size and checksum, or failed with why)
// when it ends, so none is ever half there without saying so.

// backupProgressEvery is how often backups report progress.
const backupProgressEvery = 8 << 20

// WriteTimeout bounds the write that records how a backup ended, made
// even when the caller went away.
const WriteTimeout = 30 * time.Second

// BackupHolder picks the node to keep a new backup of a service running
// on source: the ready node other than source that holds the fewest
// bytes of backups; source itself when it is the only one.
func BackupHolder(view *state.Snap, source *corpusv1.Node) *corpusv1.Node {
	held := map[string]int64{}
	for _, b := range view.Backups("") {
		held[b.NodeId] += b.SizeBytes
	}
	var cands []*corpusv1.Node
	for _, n := range view.Nodes() {
		if n.Id != source.GetId() && n.Status == state.NodeReady && n.AgentAddress != "" {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return source
	}
	sort.SliceStable(cands, func(i, j int) bool { return held[cands[i].Id] < held[cands[j].Id] })
	return cands[0]
}

// ServiceNode is the ready node running a service's guest.
func ServiceNode(view *state.Snap, svc *corpusv1.Service) (*corpusv1.Node, error) {
	if svc.GuestId == "" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("external service %s keeps no data here to back up or restore", svc.Name))
	}
	g := view.Guest(svc.GuestId)
	if g == nil || api.GuestStatus(view, g) != state.ObservedRunning {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the guest of service %s is not running", svc.Name))
	}
	n := view.Node(g.NodeId)
	if n == nil || n.AgentAddress == "" {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the node of service %s has no agent address", svc.Name))
	}
	return n, nil
}

// ServiceBackup is a new backup of svc, and the node to take it on.
func ServiceBackup(view *state.Snap, svc *corpusv1.Service, trigger string) (*corpusv1.Backup, *corpusv1.Node, error) {
	if _, ok := svc.TemplateSpec.GetFiles()["backup"]; !ok && svc.GuestId != "" {
		return nil, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("template %s has no backup script", svc.Template))
	}
	source, err := ServiceNode(view, svc)
	if err != nil {
		return nil, nil, err
	}
	return &corpusv1.Backup{Service: svc.Name, Trigger: trigger, Template: svc.Template, Version: svc.Version}, source, nil
}

// runBackup takes backup bk (of a service or a volume) on node source:
// recorded, dumped there, kept on the holder's node, finished. progress
// hears how far it is.
func runBackup(ctx context.Context, b *api.Backend, bk *corpusv1.Backup, source *corpusv1.Node, progress func(*corpusv1.BackupProgress) error) (*corpusv1.Backup, error) {
	holder := BackupHolder(b.Store.Read(), source)
	bk.Id, bk.NodeId, bk.SourceNodeId = secret.Hex(8), holder.Id, source.Id
	if _, err := b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_BeginBackup{BeginBackup: &corpusv1.BeginBackup{Backup: bk}}}); err != nil {
		return nil, err
	}
	if holder.Id == source.Id {
		progress(&corpusv1.BackupProgress{Phase: "dumping", Message: "stored on its own node " + holder.Name + ": the cluster has no other ready node to keep it"})
	}
	size, sum, err := copyBackup(ctx, b, bk, source, holder, progress)
	finish := &corpusv1.FinishBackup{Id: bk.Id, Status: corpusv1.BackupSucceeded, SizeBytes: size, Sha256: sum}
	if err != nil {
		finish = &corpusv1.FinishBackup{Id: bk.Id, Status: corpusv1.BackupFailed, Message: audit.ErrorText(err)}
	}
	// Recorded even when the caller went away meanwhile.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteTimeout)
	defer cancel()
	if _, werr := b.Write(fctx, &corpusv1.Command{Cmd: &corpusv1.Command_FinishBackup{FinishBackup: finish}}); werr != nil {
		return nil, errors.Join(err, werr)
	}
	if err != nil {
		return nil, err
	}
	return b.Store.Read().Backup(bk.Id), nil
}

// copyBackup relays the source node's dump to the holder.
func copyBackup(ctx context.Context, b *api.Backend, bk *corpusv1.Backup, source, holder *corpusv1.Node, progress func(*corpusv1.BackupProgress) error) (int64, string, error) {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dump, err := b.AgentClient(source).DumpService(dctx, connect.NewRequest(&corpusv1.DumpServiceRequest{Backup: bk}))
	if err != nil {
		return 0, "", connect.NewError(connect.CodeUnavailable, fmt.Errorf("dumping on node %s: %w", source.Name, err))
	}
	defer dump.Close()
	store := b.AgentClient(holder).StoreBackup(dctx)
	if err := store.Send(&corpusv1.BackupChunk{Backup: bk}); err != nil {
		_, err = store.CloseAndReceive()
		return 0, "", connect.NewError(connect.CodeUnavailable, fmt.Errorf("keeping the backup on node %s: %w", holder.Name, err))
	}
	var done, reported int64
	var last *corpusv1.Backup
	for dump.Receive() {
		c := dump.Msg()
		if c.Backup != nil {
			last = c.Backup // the dump's size and checksum, last
		}
		if err := store.Send(c); err != nil {
			break // the error comes with CloseAndReceive
		}
		done += int64(len(c.Data))
		if done-reported >= backupProgressEvery {
			reported = done
			if err := progress(&corpusv1.BackupProgress{Phase: "dumping", DoneBytes: done}); err != nil {
				return 0, "", err
			}
		}
	}
	if err := dump.Err(); err != nil {
		cancel()
		store.CloseAndReceive()
		return 0, "", fmt.Errorf("dumping service %s on node %s: %w", bk.Service, source.Name, err)
	}
	if last == nil || last.Sha256 == "" {
		cancel()
		store.CloseAndReceive()
		return 0, "", fmt.Errorf("node %s ended the dump without its checksum", source.Name)
	}
	res, err := store.CloseAndReceive()
	if err != nil {
		return 0, "", fmt.Errorf("keeping the backup on node %s: %w", holder.Name, err)
	}
	if res.Msg.Sha256 != last.Sha256 || res.Msg.SizeBytes != last.SizeBytes {
		return 0, "", fmt.Errorf("node %s kept %d bytes (SHA-256 %s), node %s dumped %d (%s)", holder.Name, res.Msg.SizeBytes, res.Msg.Sha256, source.Name, last.SizeBytes, last.Sha256)
	}
	return last.SizeBytes, last.Sha256, nil
}

// BackupNow takes the backup a caller asked for (bk on source, unless
// err says why not) and sends it last.
func BackupNow(ctx context.Context, b *api.Backend, bk *corpusv1.Backup, source *corpusv1.Node, err error, stream *connect.ServerStream[corpusv1.BackupProgress]) error {
	if err != nil {
		return err
	}
	if bk, err = runBackup(ctx, b, bk, source, stream.Send); err != nil {
		return api.ToConnect(err)
	}
	return stream.Send(&corpusv1.BackupProgress{Phase: "done", DoneBytes: bk.SizeBytes, Backup: bk})
}

// PickBackup returns a backup whose service the caller may use; a
// backup of a deleted service is for ops only.
func PickBackup(ctx context.Context, view *state.Snap, id string) (*corpusv1.Backup, error) {
	bk := view.Backup(id)
	if bk == nil {
		return nil, api.ToConnect(api.NotFound("backup", id, "corpus service backups"))
	}
	if bk.Volume != "" {
		if pr := auth.FromContext(ctx); pr.Kind != auth.Operator {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("backup %s is of volume %s: only ops use volumes' backups", bk.Id, bk.Volume))
		}
		return bk, nil
	}
	if svc := view.Service(bk.Service); svc != nil {
		if err := api.MayUseService(ctx, view, svc, true); err != nil {
			return nil, err
		}
	} else if pr := auth.FromContext(ctx); pr.Kind != auth.Operator {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("service %s is gone: only ops use its backups", bk.Service))
	}
	return bk, nil
}

// HolderOf is the ready node keeping a backup.
func HolderOf(view *state.Snap, bk *corpusv1.Backup) (*corpusv1.Node, error) {
	if bk.Status != corpusv1.BackupSucceeded {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("backup %s %s: nothing to read", bk.Id, bk.Status))
	}
	n := view.Node(bk.NodeId)
	if n == nil || n.Status != state.NodeReady || n.AgentAddress == "" {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the node keeping backup %s is not ready", bk.Id))
	}
	return n, nil
}

// RelayBackup streams a kept backup from its holder into the target
// node's LoadService (first message: head, then the data).
func RelayBackup(ctx context.Context, b *api.Backend, bk *corpusv1.Backup, holder, target *corpusv1.Node,
	head *corpusv1.Backup, progress func(*corpusv1.BackupProgress) error) (*corpusv1.LoadServiceResponse, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rd, err := b.AgentClient(holder).ReadBackup(rctx, connect.NewRequest(&corpusv1.ReadBackupRequest{Backup: bk}))
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("reading backup %s on node %s: %w", bk.Id, holder.Name, err))
	}
	defer rd.Close()
	load := b.AgentClient(target).LoadService(rctx)
	if err := load.Send(&corpusv1.BackupChunk{Backup: head}); err != nil {
		_, err = load.CloseAndReceive()
		return nil, err
	}
	var done, reported int64
	for rd.Receive() {
		c := rd.Msg()
		if err := load.Send(&corpusv1.BackupChunk{Data: c.Data}); err != nil {
			break
		}
		done += int64(len(c.Data))
		if done-reported >= backupProgressEvery {
			reported = done
			if err := progress(&corpusv1.BackupProgress{Phase: "restoring", DoneBytes: done}); err != nil {
				return nil, err
			}
		}
	}
	if err := rd.Err(); err != nil {
		cancel()
		load.CloseAndReceive()
		return nil, fmt.Errorf("reading backup %s on node %s: %w", bk.Id, holder.Name, err)
	}
	res, err := load.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// StoreImport relays a client's backup to its holder, which checks it
// against sum.
func StoreImport(ctx context.Context, b *api.Backend, bk *corpusv1.Backup, holder *corpusv1.Node, sum string, in *connect.ClientStream[corpusv1.BackupChunk]) (int64, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	store := b.AgentClient(holder).StoreBackup(sctx)
	if err := store.Send(&corpusv1.BackupChunk{Backup: bk}); err != nil {
		_, err = store.CloseAndReceive()
		return 0, err
	}
	var size int64
	for in.Receive() {
		data := in.Msg().Data
		size += int64(len(data))
		if err := store.Send(&corpusv1.BackupChunk{Data: data}); err != nil {
			break
		}
	}
	if err := in.Err(); err != nil {
		cancel()
		store.CloseAndReceive()
		return 0, fmt.Errorf("receiving the backup: %w", err)
	}
	tail := proto.Clone(bk).(*corpusv1.Backup)
	tail.SizeBytes, tail.Sha256 = size, sum
	if err := store.Send(&corpusv1.BackupChunk{Backup: tail}); err != nil {
		_, err = store.CloseAndReceive()
		return 0, err
	}
	res, err := store.CloseAndReceive()
	if err != nil {
		return 0, err
	}
	return res.Msg.SizeBytes, nil
}

// VolumeNode is the ready node keeping a volume.
func VolumeNode(view *state.Snap, v *corpusv1.Volume) (*corpusv1.Node, error) {
	n := view.Node(v.NodeId)
	switch {
	case v.DesiredState == state.VolumeDeleted:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is being deleted", v.Name))
	case n == nil:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is on no node yet: nothing to back up", v.Name))
	case n.Status != state.NodeReady || n.AgentAddress == "":
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the node of volume %s, %s, is %s", v.Name, n.Name, n.Status))
	}
	return n, nil
}

// VolumeBackup is a new backup of volume v, and the node to take it on.
func VolumeBackup(view *state.Snap, v *corpusv1.Volume, trigger string) (*corpusv1.Backup, *corpusv1.Node, error) {
	source, err := VolumeNode(view, v)
	if err != nil {
		return nil, nil, err
	}
	return &corpusv1.Backup{Volume: v.Name, Trigger: trigger}, source, nil
}

// BackupPolicy is a backup schedule and keep count after a change that
// asks for schedule ("" leaves it, "none" turns it off) and keep (0
// leaves it).
func BackupPolicy(curSchedule string, curKeep uint32, schedule string, keep uint32) (string, uint32, error) {
	switch schedule {
	case "":
		schedule = curSchedule
	case "none":
		schedule = ""
	}
	if keep == 0 {
		keep = curKeep
	}
	if err := state.ValidSchedule(schedule); err != nil {
		return "", 0, api.ToConnect(err)
	}
	return schedule, keep, nil
}

// RestoreSource is the backup a restore loads: from, or the newest of
// backups (newest first) that succeeded and is kept on a ready node.
// skipped counts newer ones whose node is not ready. what names their
// subject ("service db"), backupCmd the command that takes one.
func RestoreSource(ctx context.Context, view *state.Snap, backups []*corpusv1.Backup, what, backupCmd, from string) (bk *corpusv1.Backup, skipped int, err error) {
	if from != "" {
		bk, err = PickBackup(ctx, view, from)
		return bk, 0, err
	}
	for _, b := range backups {
		if b.Status != corpusv1.BackupSucceeded {
			continue
		}
		if _, err := HolderOf(view, b); err != nil {
			skipped++
			continue
		}
		return b, skipped, nil
	}
	if skipped > 0 {
		return nil, skipped, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the %d backups of %s are on nodes that are not ready", skipped, what))
	}
	return nil, 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s has no backup to restore (%s)", what, backupCmd))
}

// BackupAge says when a backup was taken and how long ago.
func BackupAge(bk *corpusv1.Backup, now time.Time) string {
	t := bk.GetFinishedAt().AsTime()
	return fmt.Sprintf("%s, %s old", t.Format("2006-01-02 15:04:05 MST"), now.Sub(t).Round(time.Second))
}
