package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestUpdateGuest changes guests through the API: in place on a node
// whose driver converges (reported as such), refused on one whose driver
// does not, idempotent, validated, audited and for operators only.
func TestUpdateGuest(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.NodeTimeout = time.Hour })
	ctx := context.Background()
	ops := s.ops()
	lx := s.enroll("lx")
	lx.report(t)
	kube := s.enroll("kube")
	_, err := kube.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{
		Capacity: capacity(), AgentAddress: kube.address, AgentVersion: "test",
		Drivers: []*corpusv1.DriverInfo{{Name: "kubernetes", Healthy: true, Exec: true, OwnNetwork: true, Converge: true}},
	}))
	if err != nil {
		t.Fatalf("Report(kube) = %v", err)
	}
	create := func(name, driver string) {
		t.Helper()
		_, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{
			Driver: driver, Image: "registry.example/app:1.0", Env: map[string]string{"MODE": "dev"},
			Ports: []*corpusv1.Port{{HostPort: 8080, GuestPort: 80}},
		}}))
		if err != nil {
			t.Fatalf("CreateGuest(%s) = %v", name, err)
		}
		s.waitFor(name+" placed", func(v *state.Snap) bool { return v.GuestByName(name).GetNodeId() != "" })
	}
	create("k", "kubernetes")
	create("c", "lxc")
	guest := func(name string) *corpusv1.Guest { return s.Store().Read().GuestByName(name) }
	update := func(req *corpusv1.UpdateGuestRequest) (*corpusv1.GuestActionResponse, error) {
		res, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	img := "registry.example/app:1.1"
	mem := int64(512 << 20)

	t.Run("converging driver", func(t *testing.T) {
		res, err := update(&corpusv1.UpdateGuestRequest{Name: "k", Image: &img, MemoryBytes: &mem,
			SetEnv: map[string]string{"TZ": "UTC"}, UnsetEnv: []string{"MODE"}, ReplacePorts: true,
			Ports: []*corpusv1.Port{{HostPort: 8443, GuestPort: 443}}})
		if err != nil || !res.Changed {
			t.Fatalf("UpdateGuest(k) = %v, %v; want changed", res, err)
		}
		sp := guest("k").Spec
		if sp.Image != img || sp.Resources.MemoryBytes != mem || sp.Env["TZ"] != "UTC" || sp.Env["MODE"] != "" ||
			len(sp.Ports) != 1 || sp.Ports[0].GuestPort != 443 || sp.Ports[0].Protocol != "tcp" || sp.Resources.CpuMillis != 250 {
			t.Errorf("spec after update = %v", sp)
		}
		before := guest("k")
		res, err = update(&corpusv1.UpdateGuestRequest{Name: "k", Image: &img, MemoryBytes: &mem})
		if err != nil || res.Changed {
			t.Fatalf("UpdateGuest(k) again = %v, %v; want unchanged", res, err)
		}
		if after := guest("k"); after.ModifyIndex != before.ModifyIndex {
			t.Errorf("an unchanged update moved the guest from index %d to %d", before.ModifyIndex, after.ModifyIndex)
		}
		var found bool
		for _, e := range s.Store().Read().Audit() {
			found = found || e.Action == "update_guest" && e.Target == "k" && e.Result == "ok" && e.Actor != state.ActorSystem
		}
		if !found {
			t.Error("no audit entry for update_guest of k")
		}
	})

	t.Run("more than the node has", func(t *testing.T) {
		huge := int64(64 << 30)
		before := guest("k")
		_, err := update(&corpusv1.UpdateGuestRequest{Name: "k", MemoryBytes: &huge})
		if codeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("UpdateGuest(k, 64G) = %v, want FailedPrecondition", err)
		}
		if !proto.Equal(guest("k").Spec, before.Spec) {
			t.Error("a refused update changed the spec")
		}
	})

	t.Run("driver that cannot converge", func(t *testing.T) {
		before := guest("c")
		_, err := update(&corpusv1.UpdateGuestRequest{Name: "c", Image: &img})
		if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "cannot change a guest in place") {
			t.Fatalf("UpdateGuest(c) = %v, want FailedPrecondition naming the driver's limit", err)
		}
		if !proto.Equal(guest("c").Spec, before.Spec) {
			t.Error("a refused update changed the spec")
		}
		// The same spec is no change, whatever the driver.
		same := "registry.example/app:1.0"
		if res, err := update(&corpusv1.UpdateGuestRequest{Name: "c", Image: &same}); err != nil || res.Changed {
			t.Errorf("UpdateGuest(c, same image) = %v, %v; want unchanged", res, err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		before := s.Store().Read().Dump()
		small, bad := int64(1024), "a;b"
		for _, req := range []*corpusv1.UpdateGuestRequest{
			{Name: "k", MemoryBytes: &small},
			{Name: "k", Image: &bad},
			{Name: "k", SetEnv: map[string]string{"A B": "x"}},
			{Name: "k", SetEnv: map[string]string{"A": "x"}, UnsetEnv: []string{"A"}},
			{Name: "k", Ports: []*corpusv1.Port{{HostPort: 1, GuestPort: 1}}},
			{Name: "K"},
		} {
			if _, err := update(req); codeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("UpdateGuest(%v) = %v, want InvalidArgument", req, err)
			}
		}
		after := s.Store().Read().Dump()
		before.Audit, after.Audit = nil, nil
		if !proto.Equal(before, after) {
			t.Error("bad input changed the state")
		}
		if _, err := update(&corpusv1.UpdateGuestRequest{Name: "nope", Image: &img}); codeOf(err) != connect.CodeNotFound {
			t.Errorf("UpdateGuest(nope) = %v, want NotFound", err)
		}
	})

	t.Run("operators only", func(t *testing.T) {
		dev := s.clients(s.userToken("dana", "dev", 0))
		_, err := dev.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "k", Image: &img}))
		if codeOf(err) != connect.CodePermissionDenied {
			t.Errorf("UpdateGuest as a dev = %v, want PermissionDenied", err)
		}
	})
}
