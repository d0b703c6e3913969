package projects

import (
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
