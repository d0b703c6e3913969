// Package imagetree is the tree of a project's release made from an OCI
// image (corpus deploy --image): the image pulled from the node's store,
// unpacked in a folder of the node for the deploy's time, what it runs
// and as whom read from its config and its tree, and the tree as a tar
// with numeric owners for the guest. The deploy pipeline (agent/deploy)
// puts it in the release's folder and runs it.
package imagetree

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
	"syscall"

	"corpus/agent/runtime/supervisor"
	"corpus/images/oci"
	"corpus/internal/imageref"
	"corpus/internal/names"
)

// Images is the node's OCI image store a deploy pulls from.
type Images interface {
	// Pull resolves ref and fetches the layers the store lacks, each
	// verified against its digest.
	Pull(ctx context.Context, ref string, progress oci.ProgressFunc) (*oci.Image, error)
	// Unpack makes dir img's root file system.
	Unpack(ctx context.Context, img *oci.Image, dir string) error
}

var _ Images = (*oci.Store)(nil)

// Source is an image pulled and unpacked on the node for a release.
type Source struct {
	Image *oci.Image
	// Root is the unpacked tree on the node, removed by Close.
	Root string
	// Argv is the image's command, its program found in the image's
	// PATH; Workdir (a folder of the image) and the ids it runs as.
	Argv     []string
	Workdir  string
	UID, GID int
	// StopSignal is the signal that stops its command.
	StopSignal syscall.Signal
	// Env is the image's env, less PORT and CORPUS_* (the pipeline's),
	// with a PATH.
	Env map[string]string
}

func (s *Source) Close() { os.RemoveAll(filepath.Dir(s.Root)) }

// Pinned is ref's repository at digest: what a release of an image
// deploys again, never its tag.
func Pinned(ref, digest string) (string, error) {
	r, err := imageref.Parse(ref, false)
	if err != nil {
		return "", err
	}
	return r.Context().Digest(digest).String(), nil
}

// Pull pulls ref from images and unpacks it in a new folder of dir
// (made when missing, root's alone: the tree keeps the image's owners
// and set-id bits with the node's ids); say hears of the progress.
// Close removes it.
func Pull(ctx context.Context, images Images, dir, ref string, say func(string, ...any)) (*Source, error) {
	img, err := images.Pull(ctx, ref, func(msg string) { say("       %s", msg) })
	if err != nil {
		return nil, err
	}
	say("       %s is %s (%d bytes in %d layers)", ref, img.Digest, img.Size, len(img.Layers))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, "unpack-")
	if err != nil {
		return nil, err
	}
	s := &Source{Image: img, Root: filepath.Join(tmp, "rootfs")}
	if err := images.Unpack(ctx, img, s.Root); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.configure(); err != nil {
		s.Close()
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	return s, nil
}

// ToDeploy is the image a release from an image deploys: the reference
// asked for, or the serving release's image at its digest (a config
// change, a deploy without --image); ref is what the release records,
// pull what is pulled. Both are "" for a release of a commit.
func ToDeploy(asked, curImage, curDigest string) (ref, pull string, err error) {
	switch {
	case asked != "":
		return asked, asked, nil
	case curDigest != "":
		pull, err := Pinned(curImage, curDigest)
		return curImage, pull, err
	}
	return "", "", nil
}

// PullPinned pulls ref's repository at digest (Pinned) as Pull does,
// and checks that what it got is that digest.
func PullPinned(ctx context.Context, images Images, dir, ref, digest string, say func(string, ...any)) (*Source, error) {
	pull, err := Pinned(ref, digest)
	if err != nil {
		return nil, err
	}
	say("-----> Pulling %s", pull)
	s, err := Pull(ctx, images, dir, pull, say)
	if err != nil {
		return nil, err
	}
	if s.Image.Digest != digest {
		s.Close()
		return nil, fmt.Errorf("%s resolved to %s, not %s", pull, s.Image.Digest, digest)
	}
	return s, nil
}

// configure reads what the image runs, and as whom, from its config and
// its tree.
func (s *Source) configure() error {
	cfg := s.Image.Config
	argv := s.Image.Command()
	if len(argv) == 0 {
		return errors.New("it has no entrypoint or cmd to run")
	}
	s.Env = map[string]string{}
	for _, kv := range cfg.Env {
		// PORT and CORPUS_* are the pipeline's to give.
		k, v, _ := strings.Cut(kv, "=")
		if !names.EnvVar(k) || k == "PORT" || strings.HasPrefix(k, "CORPUS_") || strings.ContainsRune(v, 0) {
			continue
		}
		s.Env[k] = v
	}
	if s.Env["PATH"] == "" {
		s.Env["PATH"] = supervisor.BasePath
	}
	s.Workdir = cfg.WorkingDir
	if s.Workdir == "" {
		s.Workdir = "/"
	}
	if !path.IsAbs(s.Workdir) {
		return fmt.Errorf("working dir %q is not an absolute path", s.Workdir)
	}
	sig, err := s.Image.StopSignal()
	if err != nil {
		return err
	}
	s.StopSignal = sig
	uid, gid, err := oci.LookupUser(s.Root, cfg.User)
	if err != nil {
		return err
	}
	s.UID, s.GID = int(uid), int(gid)
	prog, err := s.lookPath(argv[0])
	if err != nil {
		return err
	}
	s.Argv = append([]string{prog}, argv[1:]...)
	return nil
}

// lookPath finds the image's program as the kernel will after the
// chroot: a name without "/" in the image's PATH, a relative path from
// the working dir. Only names are looked at (Lstat, inside the tree).
func (s *Source) lookPath(prog string) (string, error) {
	if strings.Contains(prog, "/") {
		if !path.IsAbs(prog) {
			prog = path.Join(s.Workdir, prog)
		}
		return prog, nil
	}
	for _, dir := range filepath.SplitList(s.Env["PATH"]) {
		if !path.IsAbs(dir) {
			continue
		}
		cand := path.Join(dir, prog)
		if _, err := os.Lstat(filepath.Join(s.Root, cand)); err == nil {
			return cand, nil
		}
	}
	return "", fmt.Errorf("its command %q is not in its PATH (%s)", prog, s.Env["PATH"])
}

// Describe is the command as ps and the deploy's output show it.
func (s *Source) Describe() string {
	return strings.Join(s.Argv, " ") + " (image " + s.Image.Digest + ")"
}

// WriteTar writes the unpacked tree as a tar with numeric owners; what
// a tar cannot hold (sockets) is left out.
func (s *Source) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(s.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == s.Root {
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
		rel, _ := filepath.Rel(s.Root, p)
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
