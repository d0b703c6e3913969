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
// before anything changes: a deploy, of a reference, to an environment
// of one instance, in a group that can record it.
func checkImageDeploy(view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, m *corpusv1.RedeployRequest) error {
	if m.Trigger != corpusv1.TriggerDeploy {
		return api.Invalidf("an image is deployed, not restarted: drop --image, or the restart")
	}
	if err := api.ValidImageRef(m.Image); err != nil {
		return err
	}
	if len(e.Instances) > 0 {
		return api.Invalidf("%s/%s runs %d instances; a release from an image deploys to one for now (corpus scale %s web=1)", p.Name, e.Name, len(e.Instances)+1, p.Name)
	}
	return compat.Check(view.ClusterVersion(), compat.ImageReleases)
}

// imageOnOne refuses more than one instance for an environment serving
// a release from an image: the instances past the first build their
// releases from the commit's source, which it has none of.
func imageOnOne(view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, instances uint32) error {
	cur := view.ReleaseByNumber(p.Name, e.Name, e.CurrentRelease)
	if instances <= 1 || cur.GetImage() == "" {
		return nil
	}
	return api.Invalidf("%s/%s serves %s, a release from image %s, which runs on one instance for now: push a commit first to run %d", p.Name, e.Name, corpusv1.ReleaseName(cur.Number), cur.Image, instances)
}
