package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestImagesOfNodes: the image procedures ask the named node's agent;
// an agent without the image API is a clear refusal to upgrade it, one
// that cannot be reached is Unavailable, and asking every node lists
// each that did not answer instead of failing.
func TestImagesOfNodes(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	old := s.enroll("n1")
	old.address = serveFakeAgent(t, s, old) // answers Exec only
	old.report(t)
	s.enroll("n2").report(t) // its agent address answers nothing
	nodes := s.ops().nodes

	_, err := nodes.ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{Node: "n1"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("ListImages(n1, an older agent) = %v, want FailedPrecondition asking to upgrade it", err)
	}
	_, err = nodes.RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Node: "n2", Image: "busybox"}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "node n2") {
		t.Errorf("RemoveImage(n2, unreachable) = %v, want Unavailable naming n2", err)
	}
	_, err = nodes.RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Node: "n1"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("RemoveImage(n1, no image) = %v, want InvalidArgument", err)
	}
	for _, call := range []func() (map[string]string, error){
		func() (map[string]string, error) {
			r, err := nodes.ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{}))
			if err != nil {
				return nil, err
			}
			return r.Msg.Unreachable, nil
		},
		func() (map[string]string, error) {
			r, err := nodes.PruneImages(ctx, connect.NewRequest(&corpusv1.PruneImagesRequest{}))
			if err != nil {
				return nil, err
			}
			return r.Msg.Unreachable, nil
		},
	} {
		unreachable, err := call()
		if err != nil || len(unreachable) != 2 || !strings.Contains(unreachable["n1"], "upgrade") || unreachable["n2"] == "" {
			t.Errorf("every node's images = unreachable %v, %v; want n1 (upgrade) and n2 listed", unreachable, err)
		}
	}
}

// TestOCIImageForAVMDriver: a guest of an OCI image for a driver whose
// nodes run only the images it builds (libvirt) is refused at create,
// naming the driver that runs OCI images, and nothing is created or
// changed; the same image for that driver is created.
func TestOCIImageForAVMDriver(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	a := s.enroll("n1")
	if _, err := a.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), AgentAddress: a.address, AgentVersion: "test",
		Drivers: []*corpusv1.DriverInfo{
			{Name: "lxc", Healthy: true, Images: []string{"busybox"}, OciImages: true},
			{Name: "libvirt", Healthy: true, Images: []string{"debian/bookworm"}},
		}})); err != nil {
		t.Fatal(err)
	}
	guests := s.ops().guests
	ref := "registry.example:5000/team/app:1"
	_, err := guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "vm", Spec: &corpusv1.GuestSpec{Driver: "libvirt", Image: ref}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "not OCI images") || !strings.Contains(err.Error(), "--driver lxc") {
		t.Errorf("CreateGuest(libvirt, %s) = %v, want InvalidArgument naming --driver lxc", ref, err)
	}
	if g := s.Store().Read().GuestByName("vm"); g != nil {
		t.Errorf("the refused guest is in the state: %v", g)
	}
	if _, err := guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "ct", Spec: &corpusv1.GuestSpec{Driver: "lxc", Image: ref}})); err != nil {
		t.Errorf("CreateGuest(lxc, %s) = %v", ref, err)
	}
	// Nor may a VM's image become one.
	if _, err := guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "vm", Spec: &corpusv1.GuestSpec{Driver: "libvirt", Image: "debian/bookworm"}})); err != nil {
		t.Fatal(err)
	}
	_, err = guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "vm", Image: &ref}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "not OCI images") {
		t.Errorf("UpdateGuest(vm, image %s) = %v, want InvalidArgument", ref, err)
	}
	if img := s.Store().Read().GuestByName("vm").GetSpec().GetImage(); img != "debian/bookworm" {
		t.Errorf("after the refused update, vm's image is %q", img)
	}
}
