package projects

import (
	"context"

	"corpus/coordinator/admission"
	"corpus/coordinator/api"
	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	"corpus/internal/imageref"
	corpusv1 "corpus/proto/corpus/v1"
)

// validImageRelease checks what an agent says of a release made from an
// OCI image: no commit, a reference, the digest it resolved to (none
// when the image could not be pulled: the release is then failed), and
// a group whose every coordinator can store such a release.
func validImageRelease(view *state.Snap, commit, image, digest string) error {
	if commit != "" {
		return api.Invalidf("a release is made from a commit or from an image, not both (commit %.12s, image %.80q)", commit, image)
	}
	if err := api.ValidImageRef(image); err != nil {
		return err
	}
	if digest != "" {
		if err := imageref.ValidDigest(digest); err != nil {
			return api.Invalidf("%v", err)
		}
	}
	return compat.Check(view.ClusterVersion(), compat.ImageReleases)
}

// checkImageDeploy checks a deploy of an image (corpus deploy --image)
// before anything changes: a deploy, of a reference, in a group that can
// record it. Every instance runs it: those past the first pull the image
// by the digest the release records.
func checkImageDeploy(view *state.Snap, m *corpusv1.RedeployRequest) error {
	if m.Trigger != corpusv1.TriggerDeploy {
		return api.Invalidf("an image is deployed, not restarted: drop --image, or the restart")
	}
	if err := api.ValidImageRef(m.Image); err != nil {
		return err
	}
	return compat.Check(view.ClusterVersion(), compat.ImageReleases)
}

// admitImageDeploy runs the image.deploy extensions on a deploy that
// runs an image: the one named (--image), or the serving release's
// again, at its recorded digest. They may refuse it, or change the
// request (a mutating one pointing the image at a mirror, say).
func (s *Service) admitImageDeploy(ctx context.Context, view *state.Snap, e *corpusv1.ProjectEnv, m *corpusv1.RedeployRequest) error {
	var recorded *corpusv1.AdmissionImage
	if m.Image == "" {
		for _, rel := range view.Releases(m.Project, e.Name) {
			if rel.Number == e.CurrentRelease && rel.Image != "" {
				recorded = admission.Image(rel.Image, rel.ImageDigest)
			}
		}
	}
	if m.Trigger != corpusv1.TriggerDeploy || (m.Image == "" && recorded == nil) {
		return nil
	}
	project, env := m.Project, m.Env
	_, err := s.b.Admission().AdmitImage(ctx, corpusv1.OnImageDeploy, m, recorded, func() error {
		if m.Project != project || m.Env != env || m.Trigger != corpusv1.TriggerDeploy {
			return api.Invalidf("the project, environment and trigger of a deploy cannot change")
		}
		if m.Image == "" {
			return nil
		}
		return checkImageDeploy(view, m)
	})
	return err
}
