package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/deploy/imagetree"
	"corpus/agent/deploy/manifest"
	"corpus/agent/deploy/srctree"
	"corpus/agent/deploy/webcheck"
	corpusv1 "corpus/proto/corpus/v1"
)

// Releases made from an OCI image (corpus deploy --image), as Dokku's
// git:from-image makes them. The node pulls the image (every layer
// checked against its digest) into its store, unpacks it in a folder of
// its own, and the pipeline syncs that tree into the release's folder
// as rootfs/ in place of a pushed tree: the release's processes are the
// image's entrypoint and cmd, run as web chrooted there as the image's
// user, in its working dir, with its env under the project's config.
// Everything after (start beside the serving release on the other port,
// health, switch, roll, prune, rollback) is the pipeline's as for a
// push. An image that exposes a TCP port gets its web run in a network
// of its own (supervisor's ownnet.go), listening on that port with PORT
// set to it, reached through the port the deploy gave web: two releases
// of an image that listens on its own port only run side by side so. A
// config change or a deploy without --image of a release from an image
// deploys its digest again: a tag is resolved once, when named.

// errNoImages: the node's agent has no image store.
var errNoImages = errors.New("this node's agent pulls no images (it has no image store)")

// stepPull is the step that pulls the image, before the release begins.
const stepPull = "pull"

// imageRoot is where a release from an image keeps the image's tree,
// inside the release's folder.
const imageRoot = "rootfs"

// source is what the release is made of, short: its commit, or its
// image and digest.
func (d *deploy) source() string {
	if d.release.Image == "" {
		return short(d.release.Commit)
	}
	return d.release.Image + "@" + short(strings.TrimPrefix(d.release.ImageDigest, "sha256:"))
}

// syncImage puts the image's tree in the release's folder as rootfs/,
// through rN.tmp as a push's tree goes.
func (d *deploy) syncImage(rel string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(d.image.WriteTar(pw)) }()
	err := d.exec(d.ctx, []string{"sh", "-c", `set -e; rm -rf "$1.tmp" "$1"; mkdir -p "$1.tmp/$2"; tar -x -f - -C "$1.tmp/$2"; mv "$1.tmp" "$1"`,
		"sh", rel, imageRoot}, "/", nil, pr, false)
	pr.CloseWithError(errors.New("the guest's tar ended"))
	if err != nil {
		return err
	}
	d.say("       %s unpacked in %s/%s", d.image.Image.Digest, rel, imageRoot)
	return nil
}

// imageDeploy is a deploy's manifest and tree for a release from an
// image: the defaults, and no install steps or hooks.
func imageDeploy() (*manifest.Manifest, *srctree.Tree) {
	man, _ := manifest.Parse(nil)
	return man, &srctree.Tree{Hooks: map[string]bool{}, Entries: map[string]string{}}
}

// useImage makes src the deploy's tree: its files, its command as web,
// its env and its user.
func (d *deploy) useImage(src *imagetree.Source) {
	d.image, d.imageDigest = src, src.Image.Digest
	d.uid, d.gid = src.UID, src.GID
	d.man.Env = src.Env
	d.man.Processes = map[string]string{"web": src.Describe()}
}

// portHint adds to err, a web process of an image that gave no good
// answer, where it was asked and why there. web is the image's web port
// (the lowest TCP port it exposes, where its web runs in a network of
// its own, oci.Image.WebPort), 0 for an image that exposes none (its web
// takes $PORT in the guest's network); exposed is every port it
// exposes.
func portHint(err error, web int, exposed []string) error {
	switch {
	case !errors.Is(err, webcheck.ErrNoAnswer):
		return err
	case web != 0:
		return fmt.Errorf("%w; the image exposes %s, so its web runs in a network of its own and was asked on %d (PORT=%d there): it must listen on that port", err, strings.Join(exposed, ", "), web, web)
	case len(exposed) > 0:
		return fmt.Errorf("%w; the image exposes no TCP port (only %s): its web process must listen on the port in $PORT, or the image expose the TCP port it listens on", err, strings.Join(exposed, ", "))
	default:
		return fmt.Errorf("%w; the image exposes no port: its web process must listen on the port in $PORT, or the image expose the port it listens on (EXPOSE), where its web then runs in a network of its own", err)
	}
}

// pullRecorded pulls the image a release recorded, by its digest (never
// its tag), for an instance past the first to deploy it as the first
// did; Close on what it returns removes the unpacked tree.
func (p *Pipeline) pullRecorded(d *deploy) (*imagetree.Source, error) {
	if p.images == nil {
		return nil, errNoImages
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.man.Timeout)
	defer cancel()
	src, err := imagetree.PullPinned(ctx, p.images, p.imageDir, d.release.Image, d.release.ImageDigest, d.say)
	if err == nil {
		d.useImage(src)
	}
	return src, err
}

// deployImage runs the pipeline on an image: ref is recorded, pull is
// what is pulled (ref itself, or its repository at the digest a release
// recorded). A pull that fails is recorded as a failed release; what
// serves keeps serving.
func (p *Pipeline) deployImage(d *deploy, r *corpusv1.RedeployRequest, author, ref, pull string) (uint32, error) {
	if p.images == nil {
		return 0, connect.NewError(connect.CodeFailedPrecondition, errNoImages)
	}
	start := time.Now()
	d.say("-----> Pulling %s", pull)
	// Bounded as a step is: a registry that stops answering fails the
	// release rather than holding the environment.
	ctx, cancel := context.WithTimeout(d.ctx, d.man.Timeout)
	src, perr := imagetree.Pull(ctx, p.images, p.imageDir, pull, d.say)
	cancel()
	pulled := &corpusv1.ReleaseStep{Name: stepPull, Status: corpusv1.StepOK, DurationMs: time.Since(start).Milliseconds()}
	d.imageRef = ref
	if perr == nil {
		defer src.Close()
		d.useImage(src)
	} else {
		pulled.Status = corpusv1.StepFailed
	}
	if err := d.begin("", author, "image "+ref, r.Trigger); err != nil {
		return 0, connect.NewError(connect.CodeUnavailable, fmt.Errorf("recording the release: %w", err))
	}
	d.steps = append(d.steps, pulled)
	what := "deploy of image " + ref
	if r.Image == "" {
		what = r.Trigger + " of " + corpusv1.ReleaseName(d.prev.Number) + "'s image"
	}
	d.say("-----> Deploying %s/%s %s (%s, by %s)", d.project, d.env.Name, d.name(), what, author)
	var err error = &stepError{stepPull, perr}
	if perr == nil {
		err = d.run(quarantineGit{}, "")
	}
	code := d.finish(err)
	outcome := "succeeded"
	if code != 0 {
		outcome = "failed"
	}
	p.metrics.deployed(d.project, outcome, time.Since(start))
	if code != 0 {
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s failed; %s still serves", d.name(), d.serving()))
	}
	return d.release.Number, nil
}
