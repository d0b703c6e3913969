package coordinator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestAdmissionSeesImages: extensions get the OCI image a write runs
// beside its object (reference, registry, repository, and the digest
// where it is resolved): a policy allowing one registry refuses a guest
// and an image deploy from another; one requiring digests refuses a
// tag and admits a reference by digest, and a deploy of the serving
// release's image again with its recorded digest. A guest of a built
// image carries none.
func TestAdmissionSeesImages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	ops := s.ops()
	n1 := s.enroll("n1")
	n1.report(t)
	h := newHooks(t, s.caPool())
	on := func(events ...string) func(*corpusv1.Extension) {
		return func(e *corpusv1.Extension) { e.On = events }
	}
	for _, e := range []*corpusv1.Extension{
		h.ext("registries", corpusv1.ExtensionValidate, "/registries", on(corpusv1.OnGuestCreate, corpusv1.OnImageDeploy)),
		h.ext("digests", corpusv1.ExtensionValidate, "/digests", on(corpusv1.OnGuestCreate, corpusv1.OnImageDeploy)),
	} {
		if _, err := ops.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: e})); err != nil {
			t.Fatalf("adding %s: %v", e.Name, err)
		}
	}
	image := func(path string) map[string]any {
		t.Helper()
		h.mu.Lock()
		defer h.mu.Unlock()
		var req hookRequest
		if err := json.Unmarshal(h.bodies[path], &req); err != nil {
			t.Fatal(err)
		}
		return req.Image
	}
	create := func(name, img string) error {
		_, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: img}}))
		return err
	}
	refused := func(what string, err error, by, msg string) {
		t.Helper()
		if codeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "refused by extension "+by+": "+msg) {
			t.Errorf("%s = %v; want it refused by %s saying %q", what, err, by, msg)
		}
	}
	const pinned = "registry.allowed.test/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	refused("a guest from another registry", create("other", "registry.other.test/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
		"registries", "registry registry.other.test is not allowed")
	refused("a guest from a tag", create("tagged", "registry.allowed.test/team/app:1"), "digests", "image registry.allowed.test/team/app:1 has no digest")
	if got := image("/registries"); got["reference"] != "registry.allowed.test/team/app:1" || got["registry"] != "registry.allowed.test" || got["repository"] != "team/app" {
		t.Errorf("the image of a guest from a tag, as called = %v", got)
	}
	if err := create("pinned", pinned); err != nil {
		t.Fatalf("a guest from an allowed registry by digest = %v", err)
	}
	if got := image("/digests"); got["digest"] != "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("the image of a guest by digest, as called = %v; want its digest", got)
	}
	if err := create("built", "busybox"); err != nil {
		t.Fatalf("a guest of a built image = %v", err)
	}
	if got := image("/registries"); got != nil {
		t.Errorf("a guest of a built image was called with image %v, want none", got)
	}
	if g := s.Store().Read().GuestByName("other"); g != nil {
		t.Errorf("a refused guest was made: %v", g)
	}

	// Image deploys: the image named, or the serving release's again.
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "site", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	deploy := func(img string) error {
		return drain(ops.project.Deploy(ctx, connect.NewRequest(&corpusv1.RedeployRequest{Project: "site", Env: "dev", Image: img})))
	}
	refused("an image deploy from another registry", deploy("registry.other.test/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), "registries", "registry registry.other.test is not allowed")
	refused("an image deploy of a tag", deploy("registry.allowed.test/team/app:2"), "digests", "image registry.allowed.test/team/app:2 has no digest")
	s.waitFor("site-dev placed", func(v *state.Snap) bool { return v.GuestByName("site-dev").GetNodeId() == n1.id })
	const digest = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	rel, err := n1.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "site", Env: "dev",
		Image: "registry.allowed.test/team/app:3", ImageDigest: digest, Author: "ops"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: rel.Msg.Release.Id, Status: corpusv1.ReleaseSucceeded})); err != nil {
		t.Fatal(err)
	}
	// Admitted: it goes on to the node (whose agent this test is not,
	// so the deploy itself fails past the extensions).
	err = deploy("")
	if strings.Contains(err.Error(), "refused by extension") {
		t.Errorf("a deploy of the serving release's image again = %v; want it admitted with its recorded digest", err)
	}
	if got := image("/digests"); got["reference"] != "registry.allowed.test/team/app:3" || got["digest"] != digest {
		t.Errorf("the image of a deploy of the serving release again, as called = %v; want its reference and recorded digest", got)
	}
}
