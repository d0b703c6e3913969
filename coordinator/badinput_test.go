package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// badNames are values no name-like field may take: shell
// metacharacters, path traversal, control bytes, look-alikes, too long.
var badNames = []string{
	"a;b", "a|b", "a&b", "$(id)", "`id`", "a'b", `a"b`, "a\nb", "a\rb", "a\tb", "a b", "a\\b",
	"../x", "a/../b", "a/b", "/a", "..", ".", "a\x00b", "\x00",
	strings.Repeat("a", 300), strings.Repeat("a", 64<<10),
	"\u0430lice",  // Cyrillic а
	"\uff41lice",  // fullwidth a
	"ali\u200bce", // zero-width space
	"Alice", "-a", "a-", "%2e%2e", "*",
}

// badPaths are values no path inside a guest may take.
var badPaths = []string{
	"relative", "/", "/a/../b", "/a/./b", "/a//b", "/a/", "/a b", "/a\nb", "/a\x00b", "/a;b", "/$(id)", "/`id`",
	"/a|b", "/a'b", `/a"b`, "/a&b", "/" + strings.Repeat("a", 4096),
}

// badText are values a one-line free-text field may not take.
var badText = []string{"a\nb", "a\rb", "a\x00b", "a\x1bb", strings.Repeat("a", 64<<10)}

// bad filters a list: the values but those a field legitimately takes.
func bad(list []string, allowed ...string) []string {
	var out []string
	for _, v := range list {
		ok := false
		for _, a := range allowed {
			ok = ok || v == a
		}
		if !ok {
			out = append(out, v)
		}
	}
	return out
}

// TestBadInputCatalogue sends bad values in every name-like field of every
// write API, the other fields valid: each call is refused with
// InvalidArgument, changes nothing in the state (its audit entry aside),
// and the server goes on answering.
func TestBadInputCatalogue(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.NodeTimeout = time.Hour })
	ctx := context.Background()
	ops := s.ops()
	node := s.enroll("n1")
	node.report(t)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s = %v", what, err)
		}
	}
	_, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "alice", Role: "dev"}))
	must("CreateUser", err)
	_, err = ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "g1", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	must("CreateGuest", err)
	_, err = ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "web"}))
	must("CreateProject", err)
	joinToken := s.joinToken()
	enrollCSR := testCSR(t)
	s.settle()

	type request func(ctx context.Context, v string) error
	spec := func(f func(*corpusv1.GuestSpec, string)) request {
		return func(ctx context.Context, v string) error {
			sp := &corpusv1.GuestSpec{Image: "busybox"}
			f(sp, v)
			_, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "g2", Spec: sp}))
			return err
		}
	}
	fields := []struct {
		field  string
		values []string
		call   request
	}{
		{"CreateGuest.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: v, Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
			return err
		}},
		{"CreateGuest.spec.driver", badNames, spec(func(sp *corpusv1.GuestSpec, v string) { sp.Driver = v })},
		// Images may name a path of a registry or image server.
		{"CreateGuest.spec.image", bad(badNames, "a/b", "Alice"), spec(func(sp *corpusv1.GuestSpec, v string) { sp.Image = v })},
		{"CreateGuest.spec.volume.use_volume", badNames, spec(func(sp *corpusv1.GuestSpec, v string) {
			sp.Volume = &corpusv1.VolumeSpec{UseVolume: v}
		})},
		{"CreateGuest.spec.volume.path", badPaths, spec(func(sp *corpusv1.GuestSpec, v string) {
			sp.Volume = &corpusv1.VolumeSpec{SizeBytes: 64 << 20, Path: v}
		})},
		{"CreateGuest.spec.env key", bad(badNames, "Alice"), spec(func(sp *corpusv1.GuestSpec, v string) { sp.Env = map[string]string{v: "x"} })},
		{"CreateGuest.spec.env value", []string{"a\nb", "a\x00b"}, spec(func(sp *corpusv1.GuestSpec, v string) { sp.Env = map[string]string{"A": v} })},
		{"CreateGuest.spec.constraints key", badNames, spec(func(sp *corpusv1.GuestSpec, v string) { sp.Constraints = map[string]string{v: "eu"} })},
		{"CreateGuest.spec.constraints value", bad(badNames, "Alice"), spec(func(sp *corpusv1.GuestSpec, v string) {
			sp.Constraints = map[string]string{"region": v}
		})},
		{"StartGuest.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.guests.StartGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: v}))
			return err
		}},
		{"StopGuest.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: v}))
			return err
		}},
		{"DeleteGuest.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: v}))
			return err
		}},
		{"UpdateGuest.name", badNames, func(ctx context.Context, v string) error {
			img := "busybox"
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: v, Image: &img}))
			return err
		}},
		{"UpdateGuest.image", append(bad(badNames, "a/b", "Alice"), ""), func(ctx context.Context, v string) error {
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "g1", Image: &v}))
			return err
		}},
		{"UpdateGuest.set_env key", bad(badNames, "Alice"), func(ctx context.Context, v string) error {
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "g1", SetEnv: map[string]string{v: "x"}}))
			return err
		}},
		{"UpdateGuest.set_env value", []string{"a\nb", "a\x00b"}, func(ctx context.Context, v string) error {
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "g1", SetEnv: map[string]string{"A": v}}))
			return err
		}},
		{"UpdateGuest.unset_env", bad(badNames, "Alice"), func(ctx context.Context, v string) error {
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "g1", UnsetEnv: []string{v}}))
			return err
		}},
		{"UpdateGuest.memory_bytes", []string{"0", "-1", "1024", "-9223372036854775808"}, func(ctx context.Context, v string) error {
			var n int64
			fmt.Sscan(v, &n)
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "g1", MemoryBytes: &n}))
			return err
		}},
		{"UpdateGuest.cpu_millis", []string{"0", "-1", "9"}, func(ctx context.Context, v string) error {
			var n int64
			fmt.Sscan(v, &n)
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "g1", CpuMillis: &n}))
			return err
		}},
		{"UpdateGuest.ports", []string{"0:80", "80:0", "70000:80", "80:80/sctp", "80:80,80:81"}, func(ctx context.Context, v string) error {
			req := &corpusv1.UpdateGuestRequest{Name: "g1", ReplacePorts: true}
			for _, one := range strings.Split(v, ",") {
				var h, g int32
				protocol := "tcp"
				hg, p, ok := strings.Cut(one, "/")
				if ok {
					protocol = p
				}
				fmt.Sscanf(hg, "%d:%d", &h, &g)
				req.Ports = append(req.Ports, &corpusv1.Port{HostPort: h, GuestPort: g, Protocol: protocol})
			}
			_, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(req))
			return err
		}},
		{"ExecGuest.name", badNames, func(ctx context.Context, v string) error {
			return firstMessage(ops.guests.ExecGuest(ctx, connect.NewRequest(&corpusv1.ExecGuestRequest{Name: v, Argv: []string{"true"}})))
		}},
		{"CreateRoute.domain", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: v, GuestName: "g1", GuestPort: 80}))
			return err
		}},
		{"CreateRoute.guest_name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: "web.example.org", GuestName: v, GuestPort: 80}))
			return err
		}},
		{"CreateRoute.kind", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: v, Domain: "web.example.org", GuestName: "g1", GuestPort: 80}))
			return err
		}},
		{"DeleteRoute.domain", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.DeleteRoute(ctx, connect.NewRequest(&corpusv1.DeleteRouteRequest{Domain: v}))
			return err
		}},
		{"DeleteRoute.guest_name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.DeleteRoute(ctx, connect.NewRequest(&corpusv1.DeleteRouteRequest{ListenPort: 8080, GuestName: v}))
			return err
		}},
		{"MoveRoute.domain", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.MoveRoute(ctx, connect.NewRequest(&corpusv1.MoveRouteRequest{Domain: v, ToGuest: "g1"}))
			return err
		}},
		{"MoveRoute.from_guest", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.MoveRoute(ctx, connect.NewRequest(&corpusv1.MoveRouteRequest{ListenPort: 8080, FromGuest: v, ToGuest: "g1"}))
			return err
		}},
		{"MoveRoute.to_guest", badNames, func(ctx context.Context, v string) error {
			_, err := ops.ingress.MoveRoute(ctx, connect.NewRequest(&corpusv1.MoveRouteRequest{Domain: "web.example.org", ToGuest: v}))
			return err
		}},
		// DNS names are case-insensitive.
		{"AddRecord.name", bad(badNames, "Alice"), func(ctx context.Context, v string) error {
			_, err := ops.dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: v, Type: "A", Data: "10.0.0.5"}))
			return err
		}},
		{"AddRecord.type", badNames, func(ctx context.Context, v string) error {
			_, err := ops.dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: "www", Type: v, Data: "10.0.0.5"}))
			return err
		}},
		{"AddRecord.data (A)", badNames, func(ctx context.Context, v string) error {
			_, err := ops.dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: "www", Type: "A", Data: v}))
			return err
		}},
		{"AddRecord.data (CNAME)", bad(badNames, "Alice", "a-", "-a", "*"), func(ctx context.Context, v string) error {
			_, err := ops.dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: "alias", Type: "CNAME", Data: v}))
			return err
		}},
		{"DeleteRecord.id", badNames, func(ctx context.Context, v string) error {
			_, err := ops.dns.DeleteRecord(ctx, connect.NewRequest(&corpusv1.DeleteRecordRequest{Id: v}))
			return err
		}},
		{"DeleteVolume.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.volumes.DeleteVolume(ctx, connect.NewRequest(&corpusv1.DeleteVolumeRequest{Name: v}))
			return err
		}},
		{"ResizeVolume.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.volumes.ResizeVolume(ctx, connect.NewRequest(&corpusv1.ResizeVolumeRequest{Name: v, DeltaBytes: 1 << 20}))
			return err
		}},
		{"SnapshotVolume.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.volumes.SnapshotVolume(ctx, connect.NewRequest(&corpusv1.SnapshotVolumeRequest{Name: v}))
			return err
		}},
		{"BackupVolume.name", badNames, func(ctx context.Context, v string) error {
			return drain(ops.volumes.BackupVolume(ctx, connect.NewRequest(&corpusv1.BackupVolumeRequest{Name: v})))
		}},
		{"RestoreVolume.name", badNames, func(ctx context.Context, v string) error {
			return drain(ops.volumes.RestoreVolume(ctx, connect.NewRequest(&corpusv1.RestoreVolumeRequest{Name: v})))
		}},
		{"UpdateVolume.backup_schedule", []string{"monthly", "Daily", "daily; rm"}, func(ctx context.Context, v string) error {
			_, err := ops.volumes.UpdateVolume(ctx, connect.NewRequest(&corpusv1.UpdateVolumeRequest{Name: "g1", BackupSchedule: v}))
			return err
		}},
		{"MoveVolume.name", badNames, func(ctx context.Context, v string) error {
			return drain(ops.volumes.MoveVolume(ctx, connect.NewRequest(&corpusv1.MoveVolumeRequest{Name: v, ToNode: "n1"})))
		}},
		{"MoveVolume.to_node", badNames, func(ctx context.Context, v string) error {
			return drain(ops.volumes.MoveVolume(ctx, connect.NewRequest(&corpusv1.MoveVolumeRequest{Name: "g1", ToNode: v})))
		}},
		{"RemoveNode.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.nodes.RemoveNode(ctx, connect.NewRequest(&corpusv1.RemoveNodeRequest{Name: v}))
			return err
		}},
		{"SetNodeMode.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: v, Mode: "prod"}))
			return err
		}},
		{"SetNodeMode.mode", badNames, func(ctx context.Context, v string) error {
			_, err := ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: v}))
			return err
		}},
		{"CreateUser.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: v, Role: "dev"}))
			return err
		}},
		{"CreateUser.role", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "bob", Role: v}))
			return err
		}},
		{"CreateUser.auth", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "bob", Role: "dev", Auth: v}))
			return err
		}},
		{"DeleteUser.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.DeleteUser(ctx, connect.NewRequest(&corpusv1.DeleteUserRequest{Name: v}))
			return err
		}},
		{"AddKey.user", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: v, PublicKey: testPublicKey}))
			return err
		}},
		{"DeleteKey.user", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.DeleteKey(ctx, connect.NewRequest(&corpusv1.DeleteKeyRequest{User: v, Fingerprint: testFingerprint}))
			return err
		}},
		{"DeleteKey.fingerprint", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.DeleteKey(ctx, connect.NewRequest(&corpusv1.DeleteKeyRequest{User: "alice", Fingerprint: v}))
			return err
		}},
		{"CreateToken.user", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: v}))
			return err
		}},
		{"CreateToken.description", badText, func(ctx context.Context, v string) error {
			_, err := ops.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "alice", Description: v}))
			return err
		}},
		{"RevokeToken.id", badNames, func(ctx context.Context, v string) error {
			_, err := ops.users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: v}))
			return err
		}},
		{"Login.user", badNames, func(ctx context.Context, v string) error {
			_, err := s.clients("").users.Login(ctx, connect.NewRequest(&corpusv1.LoginRequest{User: v, Password: "x"}))
			if connect.CodeOf(err) == connect.CodeFailedPrecondition {
				return nil // password login is off here; the name was not looked at
			}
			return err
		}},
		{"CreateProject.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: v}))
			return err
		}},
		{"CreateProject.env", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "api", Env: v}))
			return err
		}},
		{"CreateProject.image", bad(badNames, "a/b", "Alice"), func(ctx context.Context, v string) error {
			_, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "api", Image: v}))
			return err
		}},
		{"CreateProject.driver", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "api", Driver: v}))
			return err
		}},
		{"CreateProject.domains", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "api", Domains: []string{v}}))
			return err
		}},
		// Branches may hold '/' (feature/x) and uppercase.
		{"CreateProject.branch", bad(badNames, "a/b", "Alice", "a-"), func(ctx context.Context, v string) error {
			_, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "api", Branch: v}))
			return err
		}},
		{"DeleteProject.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.DeleteProject(ctx, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: v}))
			return err
		}},
		{"DeleteProject.env", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.DeleteProject(ctx, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: "web", Env: v}))
			return err
		}},
		{"GrantProject.name", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: v, User: "alice"}))
			return err
		}},
		{"GrantProject.user", badNames, func(ctx context.Context, v string) error {
			_, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "web", User: v}))
			return err
		}},
		{"Rollback.project", badNames, func(ctx context.Context, v string) error {
			return firstMessage(ops.project.Rollback(ctx, connect.NewRequest(&corpusv1.RollbackRequest{Project: v})))
		}},
		{"Rollback.env", badNames, func(ctx context.Context, v string) error {
			return firstMessage(ops.project.Rollback(ctx, connect.NewRequest(&corpusv1.RollbackRequest{Project: "web", Env: v})))
		}},
		{"AddRaftPeer.id", badNames, func(ctx context.Context, v string) error {
			_, err := ops.cluster.AddRaftPeer(ctx, connect.NewRequest(&corpusv1.AddRaftPeerRequest{Id: v, RaftAddress: "127.0.0.1:1", ApiAddress: "127.0.0.1:2"}))
			return err
		}},
		{"AddRaftPeer.raft_address", withPort(bad(badNames, "Alice")), func(ctx context.Context, v string) error {
			_, err := ops.cluster.AddRaftPeer(ctx, connect.NewRequest(&corpusv1.AddRaftPeerRequest{Id: "c9", RaftAddress: v, ApiAddress: "127.0.0.1:2"}))
			return err
		}},
		{"AddRaftPeer.api_address", withPort(bad(badNames, "Alice")), func(ctx context.Context, v string) error {
			_, err := ops.cluster.AddRaftPeer(ctx, connect.NewRequest(&corpusv1.AddRaftPeerRequest{Id: "c9", RaftAddress: "127.0.0.1:1", ApiAddress: v}))
			return err
		}},
		{"RemoveRaftPeer.id", badNames, func(ctx context.Context, v string) error {
			_, err := ops.cluster.RemoveRaftPeer(ctx, connect.NewRequest(&corpusv1.RemoveRaftPeerRequest{Id: v}))
			return err
		}},
		{"Enroll.name", badNames, func(ctx context.Context, v string) error {
			_, err := s.clients("").agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: joinToken, Name: v, Capacity: capacity(), Drivers: drivers(), CsrPem: enrollCSR}))
			return err
		}},
		{"Enroll.labels key", badNames, func(ctx context.Context, v string) error {
			_, err := s.clients("").agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: joinToken, Name: "n2", Labels: map[string]string{v: "eu"}, Capacity: capacity(), Drivers: drivers(), CsrPem: enrollCSR}))
			return err
		}},
		{"Enroll.labels value", bad(badNames, "Alice"), func(ctx context.Context, v string) error {
			_, err := s.clients("").agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: joinToken, Name: "n2", Labels: map[string]string{"region": v}, Capacity: capacity(), Drivers: drivers(), CsrPem: enrollCSR}))
			return err
		}},
		{"Enroll.agent_address", withPort(bad(badNames, "Alice")), func(ctx context.Context, v string) error {
			_, err := s.clients("").agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: joinToken, Name: "n2", AgentAddress: v, Capacity: capacity(), Drivers: drivers(), CsrPem: enrollCSR}))
			return err
		}},
		{"Enroll.address", bad(badNames, "Alice"), func(ctx context.Context, v string) error {
			_, err := s.clients("").agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: joinToken, Name: "n2", Address: v, Capacity: capacity(), Drivers: drivers(), CsrPem: enrollCSR}))
			return err
		}},
		{"Report.agent_address", withPort(bad(badNames, "Alice")), func(ctx context.Context, v string) error {
			_, err := node.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers(), AgentAddress: v, AgentVersion: "test"}))
			return err
		}},
		{"Report.address", bad(badNames, "Alice"), func(ctx context.Context, v string) error {
			_, err := node.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers(), AgentAddress: node.address, AgentVersion: "test", Address: v}))
			return err
		}},
		{"BeginRelease.project", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: v, Env: "dev", Commit: testCommit}))
			return err
		}},
		{"BeginRelease.env", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "web", Env: v, Commit: testCommit}))
			return err
		}},
		{"BeginRelease.commit", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "web", Env: "dev", Commit: v}))
			return err
		}},
		{"BeginRelease.author", badText, func(ctx context.Context, v string) error {
			_, err := node.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "web", Env: "dev", Commit: testCommit, Author: v}))
			return err
		}},
		{"FinishRelease.id", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: v, Status: "failed"}))
			return err
		}},
		{"FinishRelease.status", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: "0123456789abcdef", Status: v}))
			return err
		}},
		{"FinishRelease.failed_step", badText, func(ctx context.Context, v string) error {
			_, err := node.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: "0123456789abcdef", Status: "failed", FailedStep: v}))
			return err
		}},
		{"BeginRelease.subject", badText[:4], func(ctx context.Context, v string) error {
			_, err := node.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "web", Env: "dev", Commit: testCommit, Subject: v}))
			return err
		}},
		{"SetCurrentRelease.project", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.SetCurrentRelease(ctx, connect.NewRequest(&corpusv1.SetCurrentReleaseRequest{Project: v, Env: "dev", Number: 1}))
			return err
		}},
		{"SetCurrentRelease.env", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.SetCurrentRelease(ctx, connect.NewRequest(&corpusv1.SetCurrentReleaseRequest{Project: "web", Env: v, Number: 1}))
			return err
		}},
		{"PruneReleases.project", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.PruneReleases(ctx, connect.NewRequest(&corpusv1.PruneReleasesRequest{Project: v, Env: "dev", Numbers: []uint32{1}}))
			return err
		}},
		{"PruneReleases.env", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.PruneReleases(ctx, connect.NewRequest(&corpusv1.PruneReleasesRequest{Project: "web", Env: v, Numbers: []uint32{1}}))
			return err
		}},
		{"SetManifestDomains.project", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.SetManifestDomains(ctx, connect.NewRequest(&corpusv1.SetManifestDomainsRequest{Project: v, Env: "dev", Domains: []string{"web.example.org"}}))
			return err
		}},
		{"SetManifestDomains.env", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.SetManifestDomains(ctx, connect.NewRequest(&corpusv1.SetManifestDomainsRequest{Project: "web", Env: v, Domains: []string{"web.example.org"}}))
			return err
		}},
		{"SetManifestDomains.domains", badNames, func(ctx context.Context, v string) error {
			_, err := node.agent.SetManifestDomains(ctx, connect.NewRequest(&corpusv1.SetManifestDomainsRequest{Project: "web", Env: "dev", Domains: []string{v}}))
			return err
		}},
	}
	// pending names known gaps whose fix lives in a file under rework
	// elsewhere: their values are still sent and must change nothing,
	// but are not yet refused with InvalidArgument.
	pending := map[string]string{}
	// good is a valid value of each field: the same call with it must get
	// past validation, so the refusals above are that field's. "" skips
	// the control (a valid raft peer would cost the test its quorum).
	good := map[string]string{
		"CreateGuest.name": "g3", "CreateGuest.spec.driver": "lxc", "CreateGuest.spec.image": "busybox",
		"CreateGuest.spec.volume.use_volume": "nope", "CreateGuest.spec.volume.path": "/srv/data",
		"CreateGuest.spec.env key": "A", "CreateGuest.spec.env value": "x y", "CreateGuest.spec.constraints key": "region",
		"CreateGuest.spec.constraints value": "eu-1", "StartGuest.name": "nope", "StopGuest.name": "nope",
		"DeleteGuest.name": "nope", "ExecGuest.name": "nope", "UpdateGuest.name": "nope", "UpdateGuest.image": "busybox",
		"UpdateGuest.set_env key": "A", "UpdateGuest.set_env value": "x y", "UpdateGuest.unset_env": "A",
		"UpdateGuest.memory_bytes": "536870912", "UpdateGuest.cpu_millis": "500", "UpdateGuest.ports": "8080:80", "CreateRoute.domain": "web.example.org",
		"CreateRoute.guest_name": "g1", "CreateRoute.kind": string(corpusv1.RouteHTTP), "DeleteRoute.domain": "nope.example.org",
		"DeleteRoute.guest_name": "nope", "MoveRoute.domain": "nope.example.org", "MoveRoute.from_guest": "nope",
		"MoveRoute.to_guest": "g3", "AddRecord.name": "www", "AddRecord.type": "A", "AddRecord.data (A)": "10.0.0.6",
		"AddRecord.data (CNAME)": "web.example.org.", "DeleteRecord.id": "abcdef", "DeleteVolume.name": "nope",
		"ResizeVolume.name": "nope", "SnapshotVolume.name": "nope", "BackupVolume.name": "nope", "RestoreVolume.name": "nope",
		"UpdateVolume.backup_schedule": "daily", "MoveVolume.name": "nope", "MoveVolume.to_node": "n1",
		"RemoveNode.name": "nope", "SetNodeMode.name": "nope", "SetNodeMode.mode": "prod", "CreateUser.name": "bob",
		"CreateUser.role": "dev", "CreateUser.auth": "ldap", "DeleteUser.name": "nope", "AddKey.user": "alice",
		"DeleteKey.user": "alice", "DeleteKey.fingerprint": testFingerprint, "CreateToken.user": "alice",
		"CreateToken.description": "for ci", "RevokeToken.id": "abcdef", "Login.user": "alice",
		"CreateProject.name": "api", "CreateProject.env": "staging", "CreateProject.image": "busybox",
		"CreateProject.driver": "lxc", "CreateProject.domains": "api.example.org", "CreateProject.branch": "feature/x",
		"DeleteProject.name": "nope", "DeleteProject.env": "prod", "GrantProject.name": "web", "GrantProject.user": "alice",
		"Rollback.project": "nope", "Rollback.env": "dev", "AddRaftPeer.id": "", "AddRaftPeer.raft_address": "",
		"AddRaftPeer.api_address": "", "RemoveRaftPeer.id": "c9", "Enroll.name": "n2", "Enroll.labels key": "region",
		"Enroll.labels value":  "eu",
		"Enroll.agent_address": "10.0.0.9:7402", "Enroll.address": "n2.example.org", "Report.agent_address": "127.0.0.1:1",
		"Report.address": "127.0.0.1", "BeginRelease.project": "web", "BeginRelease.env": "dev", "BeginRelease.commit": testCommit,
		"BeginRelease.author": "Ann Example <ann@example.org>", "BeginRelease.subject": "fix: a typo", "FinishRelease.id": "0123456789abcdef",
		"FinishRelease.status": "failed", "FinishRelease.failed_step": "build", "SetCurrentRelease.project": "web",
		"SetCurrentRelease.env": "dev", "PruneReleases.project": "web", "PruneReleases.env": "dev",
		"SetManifestDomains.project": "web", "SetManifestDomains.env": "dev", "SetManifestDomains.domains": "web2.example.org",
	}
	calls := 0
	for _, f := range fields {
		var slipped, changed []string
		var example error
		for _, v := range f.values {
			before := s.Store().Read().Dump()
			// A bound, not a figure: a refusal comes back at once, but a
			// fresh machine's first run (load 40, race-built) once held
			// one call past 8 s.
			cctx, cancel := context.WithTimeout(ctx, testrun.D(30*time.Second))
			err := f.call(cctx, v)
			cancel()
			calls++
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				slipped = append(slipped, fmt.Sprintf("%q", short(v)))
				if example == nil {
					example = fmt.Errorf("%q: %v", short(v), err)
				}
			}
			after := s.Store().Read().Dump()
			before.Audit, after.Audit = nil, nil
			if !proto.Equal(before, after) {
				changed = append(changed, fmt.Sprintf("%q", short(v)))
			}
		}
		switch {
		case pending[f.field] != "" && len(slipped) == 0:
			t.Errorf("%s is refused now: drop its pending mark (%s)", f.field, pending[f.field])
		case pending[f.field] != "":
			t.Logf("%s: %d of %d bad values answered %v, pending: %s", f.field, len(slipped), len(f.values), example, pending[f.field])
		case len(slipped) > 0:
			t.Errorf("%s: %d of %d bad values not refused with %v (%s); first: %v",
				f.field, len(slipped), len(f.values), connect.CodeInvalidArgument, strings.Join(slipped, " "), example)
		}
		if len(changed) > 0 {
			t.Errorf("%s: bad values changed the state: %s", f.field, strings.Join(changed, " "))
		}
		if _, err := ops.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
			t.Fatalf("Status after the bad %s values = %v", f.field, err)
		}
		switch g, ok := good[f.field]; {
		case !ok:
			t.Errorf("%s has no valid control value", f.field)
		case g != "":
			cctx, cancel := context.WithTimeout(ctx, testrun.D(30*time.Second))
			if err := f.call(cctx, g); connect.CodeOf(err) == connect.CodeInvalidArgument {
				t.Errorf("%s = %q (valid) = %v; want it past validation, or the refusals above prove nothing", f.field, g, err)
			}
			cancel()
			s.settle() // the scheduler may act on what the valid call made
		}
	}
	t.Logf("%d bad values in %d fields refused", calls, len(fields))
}

// settle waits until the state stops changing (placement, reports).
func (s *server) settle() {
	s.t.Helper()
	last, since := s.Store().Read().Index(), time.Now()
	for deadline := time.Now().Add(testrun.D(waitTimeout)); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if i := s.Store().Read().Index(); i != last {
			last, since = i, time.Now()
		} else if time.Since(since) > 300*time.Millisecond {
			return
		}
	}
	s.t.Fatalf("the state kept changing for %s", waitTimeout)
}

func withPort(list []string) []string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = v + ":7401"
	}
	return out
}

func drain[T any](s *connect.ServerStreamForClient[T], err error) error {
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
	}
	return s.Err()
}

func short(v string) string {
	if len(v) > 40 {
		return v[:20] + "..." + v[len(v)-10:]
	}
	return v
}

const (
	testCommit      = "0123456789abcdef0123456789abcdef01234567"
	testPublicKey   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICWUs9Ac4z5pDspwU6zy6lKYzQ3hUR5JO/o3eq3JzrII test"
	testFingerprint = "SHA256:sbL0Uv3L0d3yhryQgpS0do99ErtDbBwG9nduUq0XVqc"
)
