package deploy

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/runtime/supervisor"
	"corpus/images/oci"
	"corpus/internal/imageref"
	"corpus/internal/names"
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
// push. A config change or a deploy without --image of a release from an
// image deploys its digest again: a tag is resolved once, when named.

// stepPull is the step that pulls the image, before the release begins.
const stepPull = "pull"

// imageRoot is where a release from an image keeps the image's tree,
// inside the release's folder.
const imageRoot = "rootfs"

// Images is the node's OCI image store a deploy pulls from.
type Images interface {
	// Pull resolves ref and fetches the layers the store lacks, each
	// verified against its digest.
	Pull(ctx context.Context, ref string, progress oci.ProgressFunc) (*oci.Image, error)
	// Unpack makes dir img's root file system.
	Unpack(ctx context.Context, img *oci.Image, dir string) error
}

var _ Images = (*oci.Store)(nil)

// imageSource is an image pulled and unpacked on the node for a release.
type imageSource struct {
	img *oci.Image
	// root is the unpacked tree on the node, removed by close.
	root string
	// argv is the image's command, its program found in the image's
	// PATH; workdir and the ids where it runs.
	argv     []string
	workdir  string
	uid, gid int
	env      map[string]string
}

func (s *imageSource) close() { os.RemoveAll(filepath.Dir(s.root)) }

// pinned is ref's repository at digest: what a release of an image
// deploys again, never its tag.
func pinned(ref, digest string) (string, error) {
	r, err := imageref.Parse(ref, false)
	if err != nil {
		return "", err
	}
	return r.Context().Digest(digest).String(), nil
}

// pullImage pulls ref and unpacks it under the pipeline's image folder.
func (p *Pipeline) pullImage(ctx context.Context, ref string, say func(string, ...any)) (*imageSource, error) {
	img, err := p.images.Pull(ctx, ref, func(msg string) { say("       %s", msg) })
	if err != nil {
		return nil, err
	}
	say("       %s is %s (%d bytes in %d layers)", ref, img.Digest, img.Size, len(img.Layers))
	if err := os.MkdirAll(p.imageDir, 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(p.imageDir, "unpack-")
	if err != nil {
		return nil, err
	}
	s := &imageSource{img: img, root: filepath.Join(dir, imageRoot)}
	if err := p.images.Unpack(ctx, img, s.root); err != nil {
		s.close()
		return nil, err
	}
	if err := s.configure(); err != nil {
		s.close()
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	return s, nil
}

// configure reads what the image runs, and as whom, from its config and
// its tree.
func (s *imageSource) configure() error {
	cfg := s.img.Config
	argv := s.img.Command()
	if len(argv) == 0 {
		return errors.New("it has no entrypoint or cmd to run")
	}
	s.env = map[string]string{}
	for _, kv := range cfg.Env {
		// PORT and CORPUS_* are the pipeline's to give.
		k, v, _ := strings.Cut(kv, "=")
		if !names.EnvVar(k) || k == "PORT" || strings.HasPrefix(k, "CORPUS_") || strings.ContainsRune(v, 0) {
			continue
		}
		s.env[k] = v
	}
	if s.env["PATH"] == "" {
		s.env["PATH"] = supervisor.BasePath
	}
	s.workdir = cfg.WorkingDir
	if s.workdir == "" {
		s.workdir = "/"
	}
	if !path.IsAbs(s.workdir) {
		return fmt.Errorf("working dir %q is not an absolute path", s.workdir)
	}
	uid, gid, err := oci.LookupUser(s.root, cfg.User)
	if err != nil {
		return err
	}
	s.uid, s.gid = int(uid), int(gid)
	prog, err := s.lookPath(argv[0])
	if err != nil {
		return err
	}
	s.argv = append([]string{prog}, argv[1:]...)
	return nil
}

// lookPath finds the image's program as the kernel will after the
// chroot: a name without "/" in the image's PATH, a relative path from
// the working dir. Only names are looked at (Lstat, inside the tree).
func (s *imageSource) lookPath(prog string) (string, error) {
	if strings.Contains(prog, "/") {
		if !path.IsAbs(prog) {
			prog = path.Join(s.workdir, prog)
		}
		return prog, nil
	}
	for _, dir := range filepath.SplitList(s.env["PATH"]) {
		if !path.IsAbs(dir) {
			continue
		}
		cand := path.Join(dir, prog)
		if _, err := os.Lstat(filepath.Join(s.root, cand)); err == nil {
			return cand, nil
		}
	}
	return "", fmt.Errorf("its command %q is not in its PATH (%s)", prog, s.env["PATH"])
}

// source is what the release is made of, short: its commit, or its
// image and digest.
func (d *deploy) source() string {
	if d.release.Image == "" {
		return short(d.release.Commit)
	}
	return d.release.Image + "@" + short(strings.TrimPrefix(d.release.ImageDigest, "sha256:"))
}

// describe is the command as ps and the deploy's output show it.
func (s *imageSource) describe() string {
	return strings.Join(s.argv, " ") + " (image " + s.img.Digest + ")"
}

// writeTar writes the unpacked tree as a tar with numeric owners; what
// a tar cannot hold (sockets) is left out.
func (s *imageSource) writeTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(s.root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == s.root {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return nil // a socket: nothing to carry
		}
		rel, _ := filepath.Rel(s.root, p)
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// syncImage puts the image's tree in the release's folder as rootfs/,
// through rN.tmp as a push's tree goes.
func (d *deploy) syncImage(rel string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(d.image.writeTar(pw)) }()
	err := d.exec(d.ctx, []string{"sh", "-c", `set -e; rm -rf "$1.tmp" "$1"; mkdir -p "$1.tmp/$2"; tar -x -f - -C "$1.tmp/$2"; mv "$1.tmp" "$1"`,
		"sh", rel, imageRoot}, "/", nil, pr, false)
	pr.CloseWithError(errors.New("the guest's tar ended"))
	if err != nil {
		return err
	}
	d.say("       %s unpacked in %s/%s", d.image.img.Digest, rel, imageRoot)
	return nil
}

// imageOf is the image a release from an image deploys: the one asked
// for, or the serving release's digest (a config change, a deploy
// without --image); "" for a release of a commit.
func imageOf(asked string, cur *corpusv1.Release) (ref, pull string, err error) {
	switch {
	case asked != "":
		return asked, asked, nil
	case cur != nil && cur.ImageDigest != "":
		pull, err := pinned(cur.Image, cur.ImageDigest)
		return cur.Image, pull, err
	}
	return "", "", nil
}

// deployImage runs the pipeline on an image: ref is recorded, pull is
// what is pulled (ref itself, or its repository at the digest a release
// recorded). A pull that fails is recorded as a failed release; what
// serves keeps serving.
func (p *Pipeline) deployImage(d *deploy, r *corpusv1.RedeployRequest, author, ref, pull string) (uint32, error) {
	if p.images == nil {
		return 0, connect.NewError(connect.CodeFailedPrecondition, errors.New("this node's agent pulls no images (it has no image store)"))
	}
	start := time.Now()
	d.say("-----> Pulling %s", pull)
	// Bounded as a step is: a registry that stops answering fails the
	// release rather than holding the environment.
	ctx, cancel := context.WithTimeout(d.ctx, d.man.Timeout)
	src, perr := p.pullImage(ctx, pull, d.say)
	cancel()
	pulled := &corpusv1.ReleaseStep{Name: stepPull, Status: corpusv1.StepOK, DurationMs: time.Since(start).Milliseconds()}
	d.imageRef = ref
	if perr == nil {
		defer src.close()
		d.image, d.imageDigest = src, src.img.Digest
		d.uid, d.gid = src.uid, src.gid
		d.man.Env = src.env
		d.man.Processes = map[string]string{"web": src.describe()}
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
