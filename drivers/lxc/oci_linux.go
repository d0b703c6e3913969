//go:build linux && cgo

package lxc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"corpus/drivers"
	"corpus/images/oci"
	"corpus/internal/atomicfile"
)

// A guest whose image is an OCI reference (internal/imageref) runs the
// image's command as an application container, under liblxc's own
// minimal init (init.lxc, as lxc-execute does), which reaps orphans and
// passes the halt signal on; the command's output is the guest's
// console log. The driver pulls the image into its layer store (<Path>/.oci:
// layers by digest, shared between images) and unpacks it into a cache
// container of its own, named by the image's digest:
//
//	<Path>/.images/
//	  oci-<hex>/       cache container (hex: the digest's first 32
//	                   digits): config, rootfs (the unpacked layers),
//	                   image.json (the pulled image)
//	  oci-<hex>.json   marker written when the cache is complete
//
// From there guests are made as from a built image's cache: overlay
// clones stacked on it through an idmapped mount, or on a copy shifted to
// their id range, with their writable layer on their bounded disk.

// ociImageFile is the pulled image's description in its cache.
const ociImageFile = "image.json"

// pullImage resolves ref and fetches its layers; the image spec it
// returns names the image's cache by its digest.
func (d *Driver) pullImage(ctx context.Context, ref string, progress drivers.ProgressFunc) (imageSpec, error) {
	img, err := d.oci.Pull(ctx, ref, oci.ProgressFunc(progress))
	if err != nil {
		return imageSpec{}, err
	}
	cache := ociCache(img.Digest)
	if cache == "" {
		return imageSpec{}, fmt.Errorf("pulling %s: digest %q is not sha256", ref, img.Digest)
	}
	return imageSpec{name: ref + "@" + img.Digest, cache: cache, oci: img}, nil
}

// unpackImage makes img's cache container from its pulled layers. Its
// folder is root's alone: the tree keeps the image's set-id files with
// the host's ids.
func (d *Driver) unpackImage(img imageSpec) error {
	dir := filepath.Join(d.imgPath, img.cache)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := d.oci.Unpack(context.Background(), img.oci, filepath.Join(dir, "rootfs")); err != nil {
		return err
	}
	b, err := json.Marshal(img.oci)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, ociImageFile), b, 0o600); err != nil {
		return err
	}
	// What the busybox template writes, less its init's halt signal:
	// each guest gets its image's (configureImage).
	cfg := strings.Join([]string{
		"lxc.rootfs.path = dir:" + filepath.Join(dir, "rootfs"),
		"lxc.uts.name = " + img.cache,
		"lxc.autodev = 1",
		"lxc.tty.max = 0",
		"lxc.pty.max = 16",
		"lxc.cap.drop = sys_module mac_admin mac_override sys_time",
		"lxc.mount.auto = cgroup:mixed proc:mixed sys:ro",
		"lxc.mount.entry = shm dev/shm tmpfs defaults,create=dir 0 0",
		"lxc.mount.entry = mqueue dev/mqueue mqueue defaults,optional,create=dir 0 0",
		"",
	}, "\n")
	return atomicfile.Write(filepath.Join(dir, "config"), []byte(cfg), 0o640)
}

// configureImage makes the guest run argv (img's command, or the
// guest's in its place) from img, unpacked at rootfs, as its
// user, in its working folder, stopped by its stop signal; and returns
// the guest's environment, the image's under the spec's. Its command is
// started with the guest (startHelper: liblxc's lxc.init.cmd splits at
// blanks and takes no quotes, so it could not pass arguments with
// blanks). Values the image gives are checked as they would be from the
// API: a newline would inject lxc configuration.
func configureImage(w *configWriter, img *oci.Image, argv []string, rootfs string, env map[string]string) (map[string]string, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("image %s has no entrypoint or cmd to run (give the guest a command): %w", img.Reference, drivers.ErrInvalidSpec)
	}
	uid, gid, err := oci.LookupUser(rootfs, img.Config.User)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w: %w", img.Reference, err, drivers.ErrInvalidSpec)
	}
	cwd := img.Config.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	if !filepath.IsAbs(cwd) || strings.ContainsAny(cwd, "\n\r\x00") {
		return nil, fmt.Errorf("image %s: working dir %q is not an absolute path: %w", img.Reference, cwd, drivers.ErrInvalidSpec)
	}
	sig, err := img.StopSignal()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w: %w", img.Reference, err, drivers.ErrInvalidSpec)
	}
	halt := unix.SignalName(sig)
	if halt == "" {
		halt = strconv.Itoa(int(sig))
	}
	merged := map[string]string{}
	for _, kv := range img.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		if err := validEnv(k, v); err != nil {
			return nil, fmt.Errorf("image %s: %w: %w", img.Reference, err, drivers.ErrInvalidSpec)
		}
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	w.set("lxc.init.uid", strconv.FormatUint(uint64(uid), 10))
	w.set("lxc.init.gid", strconv.FormatUint(uint64(gid), 10))
	w.set("lxc.init.cwd", cwd)
	w.set("lxc.signal.halt", halt)
	return merged, w.err
}
