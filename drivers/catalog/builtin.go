package catalog

import (
	"os"
	"path/filepath"

	"corpus/drivers"
	"corpus/drivers/libvirt"
	"corpus/drivers/lxc"
)

// The built-in drivers.
func init() {
	register("lxc", func(c Config) (drivers.Driver, error) {
		return lxc.New(lxc.Config{Path: filepath.Join(c.StateDir, "lxc"), Logger: c.Logger})
	})
	// libvirt reads where libvirtd is from the environment:
	// CORPUS_LIBVIRT_URI (default qemu:///system), CORPUS_LIBVIRT_SOCKET
	// (default /run/libvirt/libvirt-sock) and CORPUS_LIBVIRT_IMAGES, an
	// image folder shared by agents on one host (default in the state dir).
	register("libvirt", func(c Config) (drivers.Driver, error) {
		return libvirt.New(libvirt.Config{
			URI:      os.Getenv("CORPUS_LIBVIRT_URI"),
			Socket:   os.Getenv("CORPUS_LIBVIRT_SOCKET"),
			Dir:      filepath.Join(c.StateDir, "libvirt"),
			ImageDir: os.Getenv("CORPUS_LIBVIRT_IMAGES"),
			Logger:   c.Logger,
		})
	})
}
