package services

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/api/backups"
	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// A service's backups, taken, relayed and kept by package backups,
// which volumes' backups share.

func (s *serviceService) BackupService(ctx context.Context, req *connect.Request[corpusv1.BackupServiceRequest], stream *connect.ServerStream[corpusv1.BackupProgress]) error {
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, req.Msg.Name, true)
	if err != nil {
		return err
	}
	bk, source, err := backups.ServiceBackup(view, svc, corpusv1.BackupManual)
	return backups.BackupNow(ctx, s.b, bk, source, err, stream)
}

func (s *serviceService) ListBackups(ctx context.Context, req *connect.Request[corpusv1.ListBackupsRequest]) (*connect.Response[corpusv1.ListBackupsResponse], error) {
	view := s.b.Store.Read()
	// A service's own backups are its users'; those of one that is gone,
	// and volumes', ops'.
	if svc := view.Service(req.Msg.Service); svc != nil {
		if err := api.MayUseService(ctx, view, svc, false); err != nil {
			return nil, err
		}
	}
	if req.Msg.Service != "" && req.Msg.Volume != "" {
		return nil, api.ToConnect(api.Invalidf("give a service or a volume, not both"))
	}
	res := &corpusv1.ListBackupsResponse{}
	list := view.Backups(req.Msg.Service)
	if req.Msg.Volume != "" {
		list = view.VolumeBackups(req.Msg.Volume)
	}
	for _, bk := range list {
		svc := view.Service(bk.Service)
		allowed := auth.FromContext(ctx).Kind == auth.Operator || (svc != nil && api.MayUseService(ctx, view, svc, false) == nil)
		if !allowed {
			continue
		}
		v := &corpusv1.BackupView{Backup: bk}
		if n := view.Node(bk.NodeId); n != nil {
			v.NodeName = n.Name
		}
		res.Backups = append(res.Backups, v)
	}
	return connect.NewResponse(res), nil
}

func (s *serviceService) RestoreService(ctx context.Context, req *connect.Request[corpusv1.RestoreServiceRequest], stream *connect.ServerStream[corpusv1.BackupProgress]) error {
	m := req.Msg
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, m.Name, true)
	if err != nil {
		return err
	}
	if _, ok := svc.TemplateSpec.GetFiles()["restore"]; !ok {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("template %s has no restore script", svc.Template))
	}
	bk, skipped, err := backups.RestoreSource(ctx, view, view.Backups(svc.Name), "service "+svc.Name, "corpus service backup "+svc.Name, m.From)
	if err != nil {
		return err
	}
	if bk.Service == "" {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("backup %s is of volume %s: restore it with corpus volume restore", bk.Id, bk.Volume))
	}
	if bk.Template != svc.Template {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("backup %s is of a %s service; %s is %s", bk.Id, bk.Template, svc.Name, svc.Template))
	}
	holder, err := backups.HolderOf(view, bk)
	if err != nil {
		return err
	}
	lost := serviceLost(view, svc)
	if !lost && m.ToNode != "" {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("service %s is not lost (its node is up): restore it in place, without --to-node, or move its data with corpus volume move", svc.Name))
	}
	if lost {
		if svc, err = s.moveLost(ctx, view, svc, m.ToNode, stream.Send); err != nil {
			return err
		}
	}
	target, err := backups.ServiceNode(s.b.Store.Read(), svc)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("restoring %s on node %s from backup %s of %s", svc.Name, target.Name, bk.Id, backups.BackupAge(bk, time.Now()))
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d newer on nodes that are not ready)", skipped)
	}
	if err := stream.Send(&corpusv1.BackupProgress{Phase: "restoring", Backup: bk, Message: msg}); err != nil {
		return err
	}
	head := proto.Clone(bk).(*corpusv1.Backup)
	head.Service = svc.Name
	out, err := backups.RelayBackup(ctx, s.b, bk, holder, target, head, stream.Send)
	if err == nil {
		err = s.refreshLinks(ctx, svc.Name, stream.Send)
	}
	result := "ok"
	if err != nil {
		result = "failed: " + audit.ErrorText(err)
	}
	if aerr := s.b.Audit().Record(ctx, auth.FromContext(ctx).String(), "restore", svc.Name+" from "+bk.Id+" on "+target.Name, result); aerr != nil {
		s.b.Logger.Warn("recording a restore in the audit log", "service", svc.Name, "error", aerr)
	}
	if err != nil {
		return api.ToConnect(err)
	}
	return stream.Send(&corpusv1.BackupProgress{Phase: "done", DoneBytes: out.SizeBytes, Backup: bk, Message: out.Output})
}

func (s *serviceService) ExportBackup(ctx context.Context, req *connect.Request[corpusv1.ExportBackupRequest], stream *connect.ServerStream[corpusv1.BackupChunk]) error {
	view := s.b.Store.Read()
	bk, err := backups.PickBackup(ctx, view, req.Msg.Id)
	if err != nil {
		return err
	}
	holder, err := backups.HolderOf(view, bk)
	if err != nil {
		return err
	}
	rd, err := s.b.AgentClient(holder).ReadBackup(ctx, connect.NewRequest(&corpusv1.ReadBackupRequest{Backup: bk}))
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("reading backup %s on node %s: %w", bk.Id, holder.Name, err))
	}
	defer rd.Close()
	if err := stream.Send(&corpusv1.BackupChunk{Backup: bk}); err != nil {
		return err
	}
	for rd.Receive() {
		if err := stream.Send(&corpusv1.BackupChunk{Data: rd.Msg().Data}); err != nil {
			return err
		}
	}
	if err := rd.Err(); err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("reading backup %s on node %s: %w", bk.Id, holder.Name, err))
	}
	if auditErr := s.b.Audit().Record(ctx, auth.FromContext(ctx).String(), "export backup", bk.Service+" "+bk.Id, "ok"); auditErr != nil {
		s.b.Logger.Warn("recording an export in the audit log", "backup", bk.Id, "error", auditErr)
	}
	return nil
}

func (s *serviceService) ImportBackup(ctx context.Context, stream *connect.ClientStream[corpusv1.BackupChunk]) (*connect.Response[corpusv1.ImportBackupResponse], error) {
	if !stream.Receive() {
		return nil, api.ToConnect(api.Invalidf("no backup header: the first message names the service and the data's SHA-256"))
	}
	head := stream.Msg().Backup
	if head == nil || head.Service == "" || len(head.Sha256) != 64 {
		return nil, api.ToConnect(api.Invalidf("the first message must name the service and give the data's SHA-256 (64 hex digits)"))
	}
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, head.Service, true)
	if err != nil {
		return nil, err
	}
	if svc.GuestId == "" {
		return nil, api.ToConnect(api.Invalidf("external service %s keeps no data here", svc.Name))
	}
	g := view.Guest(svc.GuestId)
	holder := backups.BackupHolder(view, view.Node(g.GetNodeId()))
	if holder == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no ready node to keep the backup"))
	}
	bk := &corpusv1.Backup{Id: secret.Hex(8), Service: svc.Name, NodeId: holder.Id, Trigger: corpusv1.BackupImport,
		Template: svc.Template, Version: svc.Version}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_BeginBackup{BeginBackup: &corpusv1.BeginBackup{Backup: bk}}}); err != nil {
		return nil, err
	}
	size, err := backups.StoreImport(ctx, s.b, bk, holder, head.Sha256, stream)
	finish := &corpusv1.FinishBackup{Id: bk.Id, Status: corpusv1.BackupSucceeded, SizeBytes: size, Sha256: head.Sha256}
	if err != nil {
		finish = &corpusv1.FinishBackup{Id: bk.Id, Status: corpusv1.BackupFailed, Message: audit.ErrorText(err)}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backups.WriteTimeout)
	defer cancel()
	if _, werr := s.b.Write(fctx, &corpusv1.Command{Cmd: &corpusv1.Command_FinishBackup{FinishBackup: finish}}); werr != nil {
		return nil, errors.Join(err, werr)
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.ImportBackupResponse{Backup: s.b.Store.Read().Backup(bk.Id)}), nil
}

func (s *serviceService) DeleteBackup(ctx context.Context, req *connect.Request[corpusv1.DeleteBackupRequest]) (*connect.Response[corpusv1.DeleteBackupResponse], error) {
	view := s.b.Store.Read()
	bk, err := backups.PickBackup(ctx, view, req.Msg.Id)
	if err != nil {
		return nil, err
	}
	if bk.Status == corpusv1.BackupRunning {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("backup %s is still running", bk.Id))
	}
	if err := backups.RemoveBackup(ctx, s.b, bk); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteBackupResponse{Backup: bk}), nil
}
