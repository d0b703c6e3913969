package coordinator_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// firstMessage opens a server stream and reads one message: nil when the
// call was let through and answered, else the call's error.
func firstMessage[T any](stream *connect.ServerStreamForClient[T], err error) error {
	if err != nil {
		return err
	}
	defer stream.Close()
	if stream.Receive() {
		return nil
	}
	return stream.Err()
}

// authCalls makes one call to each procedure. Requests are chosen so an
// authorized caller gets an answer or a handler error that is neither
// Unauthenticated nor PermissionDenied.
var authCalls = map[string]func(ctx context.Context, c clients) error{
	corpusv1connect.VolumeServiceSnapshotVolumeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.volumes.SnapshotVolume(ctx, connect.NewRequest(&corpusv1.SnapshotVolumeRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.VolumeServiceBackupVolumeProcedure: func(ctx context.Context, c clients) error {
		return drain(c.volumes.BackupVolume(ctx, connect.NewRequest(&corpusv1.BackupVolumeRequest{Name: "nope"})))
	},
	corpusv1connect.VolumeServiceRestoreVolumeProcedure: func(ctx context.Context, c clients) error {
		return drain(c.volumes.RestoreVolume(ctx, connect.NewRequest(&corpusv1.RestoreVolumeRequest{Name: "nope"})))
	},
	corpusv1connect.VolumeServiceUpdateVolumeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.volumes.UpdateVolume(ctx, connect.NewRequest(&corpusv1.UpdateVolumeRequest{Name: "nope", BackupSchedule: "daily"}))
		return err
	},
	corpusv1connect.VolumeServiceMoveVolumeProcedure: func(ctx context.Context, c clients) error {
		s, err := c.volumes.MoveVolume(ctx, connect.NewRequest(&corpusv1.MoveVolumeRequest{Name: "nope", ToNode: "n1"}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	},
	corpusv1connect.VolumeServiceResizeVolumeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.volumes.ResizeVolume(ctx, connect.NewRequest(&corpusv1.ResizeVolumeRequest{Name: "nope", DeltaBytes: 1}))
		return err
	},
	corpusv1connect.VolumeServiceListVolumesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.volumes.ListVolumes(ctx, connect.NewRequest(&corpusv1.ListVolumesRequest{}))
		return err
	},
	corpusv1connect.VolumeServiceGetVolumeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.volumes.GetVolume(ctx, connect.NewRequest(&corpusv1.GetVolumeRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.VolumeServiceDeleteVolumeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.volumes.DeleteVolume(ctx, connect.NewRequest(&corpusv1.DeleteVolumeRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.SnapshotServiceSaveSnapshotProcedure: func(ctx context.Context, c clients) error {
		s, err := c.snap.SaveSnapshot(ctx, connect.NewRequest(&corpusv1.SaveSnapshotRequest{Key: make([]byte, 32)}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	},
	corpusv1connect.SnapshotServiceRestoreSnapshotProcedure: func(ctx context.Context, c clients) error {
		s := c.snap.RestoreSnapshot(ctx)
		s.Send(&corpusv1.RestoreSnapshotRequest{})
		_, err := s.CloseAndReceive()
		return err
	},
	corpusv1connect.DnsServiceListRecordsProcedure: func(ctx context.Context, c clients) error {
		_, err := c.dns.ListRecords(ctx, connect.NewRequest(&corpusv1.ListRecordsRequest{}))
		return err
	},
	corpusv1connect.DnsServiceAddRecordProcedure: func(ctx context.Context, c clients) error {
		_, err := c.dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{}))
		return err
	},
	corpusv1connect.DnsServiceDeleteRecordProcedure: func(ctx context.Context, c clients) error {
		_, err := c.dns.DeleteRecord(ctx, connect.NewRequest(&corpusv1.DeleteRecordRequest{Id: "nope"}))
		return err
	},
	corpusv1connect.IngressServiceCreateRouteProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{}))
		return err
	},
	corpusv1connect.IngressServiceListRoutesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ingress.ListRoutes(ctx, connect.NewRequest(&corpusv1.ListRoutesRequest{}))
		return err
	},
	corpusv1connect.IngressServiceDeleteRouteProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ingress.DeleteRoute(ctx, connect.NewRequest(&corpusv1.DeleteRouteRequest{Domain: "nope.test"}))
		return err
	},
	corpusv1connect.IngressServiceMoveRouteProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ingress.MoveRoute(ctx, connect.NewRequest(&corpusv1.MoveRouteRequest{Domain: "nope.test", ToGuest: "nope"}))
		return err
	},
	corpusv1connect.UserServiceCreateTokenProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "-bad"}))
		return err
	},
	corpusv1connect.UserServiceListTokensProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{}))
		return err
	},
	corpusv1connect.UserServiceLoginProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.Login(ctx, connect.NewRequest(&corpusv1.LoginRequest{User: "nope", Password: "nope"}))
		return err
	},
	corpusv1connect.UserServiceRevokeTokenProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: "nope"}))
		return err
	},
	corpusv1connect.AuditServiceListAuditProcedure: func(ctx context.Context, c clients) error {
		_, err := c.audit.ListAudit(ctx, connect.NewRequest(&corpusv1.ListAuditRequest{}))
		return err
	},
	corpusv1connect.ClusterServicePeerProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.Peer(ctx, connect.NewRequest(&corpusv1.PeerRequest{}))
		return err
	},
	corpusv1connect.ClusterServiceApplyProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.Apply(ctx, connect.NewRequest(&corpusv1.ApplyRequest{Command: []byte("garbage")}))
		return err
	},
	corpusv1connect.ClusterServiceSeenProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.Seen(ctx, connect.NewRequest(&corpusv1.SeenRequest{}))
		return err
	},
	corpusv1connect.ClusterServiceReadIndexProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.ReadIndex(ctx, connect.NewRequest(&corpusv1.ReadIndexRequest{}))
		return err
	},
	corpusv1connect.ClusterServiceRaftPeersProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.RaftPeers(ctx, connect.NewRequest(&corpusv1.RaftPeersRequest{}))
		return err
	},
	corpusv1connect.ClusterServiceAddRaftPeerProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.AddRaftPeer(ctx, connect.NewRequest(&corpusv1.AddRaftPeerRequest{Id: "-bad"}))
		return err
	},
	corpusv1connect.ClusterServiceRemoveRaftPeerProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.RemoveRaftPeer(ctx, connect.NewRequest(&corpusv1.RemoveRaftPeerRequest{Id: "nope"}))
		return err
	},
	corpusv1connect.ClusterServiceStatusProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
		return err
	},
	corpusv1connect.NodeServiceCreateJoinTokenProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{TtlSeconds: -1}))
		return err
	},
	corpusv1connect.NodeServiceListNodesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.ListNodes(ctx, connect.NewRequest(&corpusv1.ListNodesRequest{}))
		return err
	},
	corpusv1connect.NodeServiceRemoveNodeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.RemoveNode(ctx, connect.NewRequest(&corpusv1.RemoveNodeRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.NodeServiceGetNodeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.GetNode(ctx, connect.NewRequest(&corpusv1.GetNodeRequest{Name: "n1"}))
		return err
	},
	corpusv1connect.NodeServiceSetNodeModeProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "nope", Mode: "dev"}))
		return err
	},
	corpusv1connect.NodeServiceDrainStatusProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.DrainStatus(ctx, connect.NewRequest(&corpusv1.DrainStatusRequest{Name: "n1"}))
		return err
	},
	corpusv1connect.NodeServiceListImagesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{Node: "nope"}))
		return err
	},
	corpusv1connect.NodeServiceRemoveImageProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Node: "nope", Image: "busybox"}))
		return err
	},
	corpusv1connect.NodeServicePruneImagesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.nodes.PruneImages(ctx, connect.NewRequest(&corpusv1.PruneImagesRequest{Node: "nope"}))
		return err
	},
	corpusv1connect.GuestServiceCreateGuestProcedure: func(ctx context.Context, c clients) error {
		_, err := c.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{}))
		return err
	},
	corpusv1connect.GuestServiceGetGuestProcedure: func(ctx context.Context, c clients) error {
		_, err := c.guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.GuestServiceListGuestsProcedure: func(ctx context.Context, c clients) error {
		_, err := c.guests.ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{}))
		return err
	},
	corpusv1connect.GuestServiceStartGuestProcedure: func(ctx context.Context, c clients) error {
		_, err := c.guests.StartGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.GuestServiceStopGuestProcedure: func(ctx context.Context, c clients) error {
		_, err := c.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.GuestServiceDeleteGuestProcedure: func(ctx context.Context, c clients) error {
		_, err := c.guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.GuestServiceUpdateGuestProcedure: func(ctx context.Context, c clients) error {
		img := "busybox"
		_, err := c.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "nope", Image: &img}))
		return err
	},
	corpusv1connect.GuestServiceExecGuestProcedure: func(ctx context.Context, c clients) error {
		return firstMessage(c.guests.ExecGuest(ctx, connect.NewRequest(&corpusv1.ExecGuestRequest{Name: "nope", Argv: []string{"true"}})))
	},
	corpusv1connect.GuestServiceShellProcedure: func(ctx context.Context, c clients) error {
		st := c.guests.Shell(ctx)
		defer st.CloseResponse()
		// A refused stream's Send says io.EOF; Receive says why.
		if err := st.Send(&corpusv1.ShellInput{Open: &corpusv1.ExecGuestRequest{Name: "nope", Argv: []string{"true"}}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err := st.Receive()
		return err
	},
	corpusv1connect.GuestServiceGuestLogsProcedure: func(ctx context.Context, c clients) error {
		return firstMessage(c.guests.GuestLogs(ctx, connect.NewRequest(&corpusv1.GuestLogsRequest{Name: "nope"})))
	},
	corpusv1connect.ProjectServiceProjectLogsProcedure: func(ctx context.Context, c clients) error {
		return firstMessage(c.project.ProjectLogs(ctx, connect.NewRequest(&corpusv1.ProjectLogsRequest{Project: "nope"})))
	},
	corpusv1connect.AgentServiceEnrollProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{}))
		return err
	},
	corpusv1connect.AgentServiceRenewCertificateProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.RenewCertificate(ctx, connect.NewRequest(&corpusv1.RenewCertificateRequest{}))
		return err
	},
	corpusv1connect.AgentServiceWatchProcedure: func(ctx context.Context, c clients) error {
		return firstMessage(c.agent.Watch(ctx, connect.NewRequest(&corpusv1.WatchRequest{})))
	},
	corpusv1connect.AgentServiceGitAccessProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.GitAccess(ctx, connect.NewRequest(&corpusv1.GitAccessRequest{Fingerprint: "SHA256:nope"}))
		return err
	},
	corpusv1connect.AgentServiceBeginReleaseProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "nope", Env: "dev", Commit: "c0ffee"}))
		return err
	},
	corpusv1connect.AgentServiceFinishReleaseProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: "nope", Status: "failed"}))
		return err
	},
	corpusv1connect.AgentServiceSetCurrentReleaseProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.SetCurrentRelease(ctx, connect.NewRequest(&corpusv1.SetCurrentReleaseRequest{Project: "nope", Env: "dev", Number: 1}))
		return err
	},
	corpusv1connect.AgentServicePruneReleasesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.PruneReleases(ctx, connect.NewRequest(&corpusv1.PruneReleasesRequest{Project: "nope", Env: "dev"}))
		return err
	},
	corpusv1connect.ProjectServiceSetConfigProcedure: func(ctx context.Context, c clients) error {
		return firstMessage(c.project.SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{Project: "nope", Set: map[string]string{"A": "1"}})))
	},
	corpusv1connect.ProjectServiceGetConfigProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.GetConfig(ctx, connect.NewRequest(&corpusv1.GetConfigRequest{Project: "nope"}))
		return err
	},
	corpusv1connect.ProjectServiceDeployProcedure: func(ctx context.Context, c clients) error {
		return firstMessage(c.project.Deploy(ctx, connect.NewRequest(&corpusv1.RedeployRequest{Project: "nope"})))
	},
	corpusv1connect.ProjectServiceListProcessesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.ListProcesses(ctx, connect.NewRequest(&corpusv1.ListProcessesRequest{Project: "nope"}))
		return err
	},
	corpusv1connect.ClusterServiceWaitProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.Wait(ctx, connect.NewRequest(&corpusv1.WaitRequest{}))
		return err
	},
	corpusv1connect.ClusterServiceSeriesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.Series(ctx, connect.NewRequest(&corpusv1.SeriesRequest{}))
		return err
	},
	corpusv1connect.ExtensionServiceAddExtensionProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: &corpusv1.Extension{Name: "nope", Url: "http://plain/"}}))
		return err
	},
	corpusv1connect.ExtensionServiceListExtensionsProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ext.ListExtensions(ctx, connect.NewRequest(&corpusv1.ListExtensionsRequest{}))
		return err
	},
	corpusv1connect.ExtensionServiceGetExtensionProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ext.GetExtension(ctx, connect.NewRequest(&corpusv1.GetExtensionRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.ExtensionServiceSetExtensionDisabledProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ext.SetExtensionDisabled(ctx, connect.NewRequest(&corpusv1.SetExtensionDisabledRequest{Name: "nope", Disabled: true}))
		return err
	},
	corpusv1connect.ExtensionServiceDeleteExtensionProcedure: func(ctx context.Context, c clients) error {
		_, err := c.ext.DeleteExtension(ctx, connect.NewRequest(&corpusv1.DeleteExtensionRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.AgentServiceLintPushProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.LintPush(ctx, connect.NewRequest(&corpusv1.LintPushRequest{Project: "nope", Env: "dev"}))
		return err
	},
	corpusv1connect.ClusterServiceRotateCaProcedure: func(ctx context.Context, c clients) error {
		// Abort: no rotation runs, so nothing changes when let in.
		_, err := c.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{Abort: true}))
		return err
	},
	corpusv1connect.ClusterServiceCaStatusProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.CaStatus(ctx, connect.NewRequest(&corpusv1.CaStatusRequest{}))
		return err
	},
	corpusv1connect.ClusterServiceRotateKeyringProcedure: func(ctx context.Context, c clients) error {
		_, err := c.cluster.RotateKeyring(ctx, connect.NewRequest(&corpusv1.RotateKeyringRequest{}))
		return err
	},
	corpusv1connect.AgentServiceRecordShellProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.RecordShell(ctx, connect.NewRequest(&corpusv1.RecordShellRequest{Fingerprint: "SHA256:nope", Guest: "nope", Result: "started"}))
		return err
	},
	corpusv1connect.AgentServiceSetWebPortProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.SetWebPort(ctx, connect.NewRequest(&corpusv1.SetWebPortRequest{Project: "nope", Env: "dev", Port: 81}))
		return err
	},
	corpusv1connect.AgentServiceSetManifestDomainsProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.SetManifestDomains(ctx, connect.NewRequest(&corpusv1.SetManifestDomainsRequest{Project: "nope", Env: "dev"}))
		return err
	},
	corpusv1connect.UserServiceCreateUserProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "-bad"}))
		return err
	},
	corpusv1connect.UserServiceListUsersProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.ListUsers(ctx, connect.NewRequest(&corpusv1.ListUsersRequest{}))
		return err
	},
	corpusv1connect.UserServiceDeleteUserProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.DeleteUser(ctx, connect.NewRequest(&corpusv1.DeleteUserRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.UserServiceAddKeyProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: "nope", PublicKey: "garbage"}))
		return err
	},
	corpusv1connect.UserServiceDeleteKeyProcedure: func(ctx context.Context, c clients) error {
		_, err := c.users.DeleteKey(ctx, connect.NewRequest(&corpusv1.DeleteKeyRequest{User: "nope", Fingerprint: "SHA256:nope"}))
		return err
	},
	corpusv1connect.ProjectServiceCreateProjectProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "-bad"}))
		return err
	},
	corpusv1connect.ProjectServiceListProjectsProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.ListProjects(ctx, connect.NewRequest(&corpusv1.ListProjectsRequest{}))
		return err
	},
	corpusv1connect.ProjectServiceGetProjectProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.ProjectServiceDeleteProjectProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.DeleteProject(ctx, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: "nope"}))
		return err
	},
	corpusv1connect.ProjectServiceGrantProjectProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "nope", User: "nope"}))
		return err
	},
	corpusv1connect.ProjectServiceListReleasesProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.ListReleases(ctx, connect.NewRequest(&corpusv1.ListReleasesRequest{Project: "nope"}))
		return err
	},
	corpusv1connect.ProjectServiceGetReleaseProcedure: func(ctx context.Context, c clients) error {
		_, err := c.project.GetRelease(ctx, connect.NewRequest(&corpusv1.GetReleaseRequest{Project: "nope", Release: "r1"}))
		return err
	},
	corpusv1connect.ProjectServiceRollbackProcedure: func(ctx context.Context, c clients) error {
		return firstMessage(c.project.Rollback(ctx, connect.NewRequest(&corpusv1.RollbackRequest{Project: "nope"})))
	},
	corpusv1connect.AgentServiceReportProcedure: func(ctx context.Context, c clients) error {
		_, err := c.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers()}))
		return err
	},
}

// TestPoliciesCoverTheAPI checks that every procedure the coordinator
// serves has a policy (the interceptor refuses the others) and a call in
// the auth table below.
func TestPoliciesCoverTheAPI(t *testing.T) {
	t.Parallel()
	var served []string
	protoregistry.GlobalFiles.RangeFilesByPackage("corpus.v1", func(f protoreflect.FileDescriptor) bool {
		services := f.Services()
		for i := range services.Len() {
			svc := services.Get(i)
			if svc.FullName() == corpusv1connect.NodeAgentServiceName {
				continue // served by agents, not coordinators
			}
			for j := range svc.Methods().Len() {
				served = append(served, "/"+string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(served) < 50 {
		t.Fatalf("found only %d procedures in package corpus.v1: are its files linked in?", len(served))
	}
	for _, proc := range served {
		if _, ok := api.Policies[proc]; !ok {
			t.Errorf("api.Policies[%s] is missing: nobody may call it", proc)
		}
		if _, ok := authCalls[proc]; !ok {
			t.Errorf("authCalls[%s] is missing: its policy is untested", proc)
		}
	}
	for proc := range api.Policies {
		if !slices.Contains(served, proc) {
			t.Errorf("api.Policies has %s, which the coordinator does not serve", proc)
		}
	}
}

// refusedTLS marks callers refused before any request is read: their
// certificate (or the server's, for them) is not of the cluster CA.
const refusedTLS auth.Kind = "tls"

func TestAuth(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	node := s.enroll("n1")
	coordKey := rpc.CoordinatorCredentialPrefix + s.Store().Read().Config().GetCoordinatorKey()
	coordCert := s.issue(pki.RoleCoordinator, "c9", time.Hour)

	// A node removed: its certificate stops working at once.
	gone := s.enroll("gone")
	if _, err := s.ops().nodes.RemoveNode(ctx, connect.NewRequest(&corpusv1.RemoveNodeRequest{Name: "gone"})); err != nil {
		t.Fatalf("RemoveNode(gone) = %v", err)
	}
	// A node that renewed twice: its first certificate is refused.
	renewed := s.enroll("renewed")
	renewed.renew(t)
	renewed.renew(t)

	// Another cluster's CA: its certificates, and servers, are strangers.
	otherDir := t.TempDir()
	otherCert, otherKey, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(otherDir, "ca.crt"), otherCert, 0o600)
	os.WriteFile(filepath.Join(otherDir, "ca.key"), otherKey, 0o600)
	foreignNode := issueFrom(t, otherDir, pki.RoleNode, node.id, time.Hour)
	otherCA, _ := pki.ParseCert(otherCert)
	otherPool := x509.NewCertPool()
	otherPool.AddCert(otherCA)
	trustingOther := clientsAt(rpc.HTTPClient(pki.ClientConfig(otherPool, nil, pki.RoleCoordinator, "")), s.url(), s.OpsToken())

	callers := []struct {
		name string
		c    clients
		kind auth.Kind // "" for a credential that must be refused
	}{
		{"anonymous", s.clients(""), auth.Anonymous},
		{"ops", s.ops(), auth.Operator},
		{"node", node.clients, auth.Agent},
		{"coordinator", s.clientsAs(coordCert, coordKey), auth.Coordinator},
		{"replica without the key", s.clientsAs(coordCert, ""), auth.Replica},
		{"ops user", s.clients(s.userToken("root", "ops", 0)), auth.Operator},
		{"dev user", s.clients(s.userToken("alice", "dev", 0)), auth.Dev},
		{"viewer user", s.clients(s.userToken("val", "viewer", 0)), auth.Viewer},
		{"revoked token", s.clients(s.revokedToken("bob")), ""},
		{"expired token", s.clients(s.userToken("eve", "dev", time.Second)), ""},
		{"malformed user token", s.clients("cusr_nounderscore"), ""},
		{"wrong coordinator key", s.clientsAs(coordCert, rpc.CoordinatorCredentialPrefix+"0000"), ""},
		{"coordinator key without certificate", s.clients(coordKey), ""},
		{"wrong ops token", s.clients("cops_0000"), ""},
		{"node certificate with a user token", s.clientsAs(node.cert, s.OpsToken()), ""},
		{"removed node's certificate", s.clientsAs(gone.cert, ""), ""},
		{"replaced node certificate", s.clientsAs(renewed.first, ""), ""},
		{"certificate of another CA", s.clientsAs(foreignNode, ""), refusedTLS},
		{"server of another CA", trustingOther, refusedTLS},
	}
	time.Sleep(time.Second) // eve's token expires
	procs := make([]string, 0, len(api.Policies))
	for proc := range api.Policies {
		procs = append(procs, proc)
	}
	slices.Sort(procs)
	for _, proc := range procs {
		policy := api.Policies[proc]
		call := authCalls[proc]
		if call == nil {
			t.Errorf("authCalls[%s] is missing", proc)
			continue
		}
		for _, c := range callers {
			t.Run(proc+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), testrun.D(waitTimeout))
				defer cancel()
				err := call(ctx, c.c)
				got := codeOf(err)
				switch {
				case c.kind == refusedTLS:
					// TLS 1.3 refuses a client certificate after the
					// client sent its request: it sees an alert, a reset
					// or a broken pipe, never an answer.
					if err == nil || (got != connect.CodeUnavailable && got != connect.CodeUnknown && got != connect.CodeCanceled) {
						t.Errorf("%s as %s = %v, want the TLS handshake refused", proc, c.name, err)
					}
				case c.kind == "":
					if got != connect.CodeUnauthenticated {
						t.Errorf("%s as %s = %v, want %v", proc, c.name, err, connect.CodeUnauthenticated)
					}
				case slices.Contains(policy, c.kind):
					if got == connect.CodeUnauthenticated || got == connect.CodePermissionDenied {
						t.Errorf("%s as %s = %v, want it allowed", proc, c.name, err)
					}
				case c.kind == auth.Anonymous:
					if got != connect.CodeUnauthenticated {
						t.Errorf("%s as %s = %v, want %v", proc, c.name, err, connect.CodeUnauthenticated)
					}
				default:
					if got != connect.CodePermissionDenied {
						t.Errorf("%s as %s = %v, want %v", proc, c.name, err, connect.CodePermissionDenied)
					}
				}
			})
		}
	}
}

func TestStatusNamesTheCaller(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	node := s.enroll("n1")
	for _, c := range []struct {
		name string
		c    clients
		want string
	}{
		{"ops", s.ops(), "ops"},
		{"node", node.clients, "node:n1"},
	} {
		res, err := c.c.cluster.Status(context.Background(), connect.NewRequest(&corpusv1.StatusRequest{}))
		if err != nil {
			t.Fatalf("Status() as %s = %v", c.name, err)
		}
		if res.Msg.Who != c.want || res.Msg.ClusterId == "" || res.Msg.Leader == "" || res.Msg.Nodes != 1 {
			t.Errorf("Status() as %s = %v, want who %q, a cluster id, a leader and one node", c.name, res.Msg, c.want)
		}
	}
}
