package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"corpus/cmd/corpus/cli"
	"corpus/drivers"
	"corpus/drivers/libvirt"
	"corpus/drivers/lxc"
)

// imageBuilder is a driver that can build an image ahead of the guests
// that use it.
type imageBuilder interface {
	EnsureImage(ctx context.Context, name string, progress drivers.ProgressFunc) error
}

// packageImageBuilder builds images with extra packages installed
// (drivers.GuestSpec.Packages).
type packageImageBuilder interface {
	EnsureImagePackages(ctx context.Context, name string, packages []string, progress drivers.ProgressFunc) error
}

var (
	_ packageImageBuilder = (*lxc.Driver)(nil)
	_ imageBuilder        = (*lxc.Driver)(nil)
	_ imageBuilder        = (*libvirt.Driver)(nil)
)

// newImageCmd builds a node's guest images ahead of its guests: where the
// agent has no route to the Debian mirror, or to have the first guest
// start at once.
func newImageCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Guest images of this host"}
	var dir, stateDir, driver string
	var packages []string
	build := &cobra.Command{
		Use:   "build IMAGE [--driver libvirt|lxc]",
		Short: "Build a guest image on this host (idempotent; waits for a build in progress)",
		Example: `  corpus image build debian/bookworm
  CORPUS_LIBVIRT_IMAGES=/srv/images corpus image build debian/bookworm
  corpus image build busybox --driver lxc --state-dir /var/lib/corpus/agent
  corpus image build debian/bookworm --driver lxc --packages python3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The variable is read here, not made the flag's default,
			// so that --help and the reference read the same on every
			// host.
			if env := os.Getenv("CORPUS_LIBVIRT_IMAGES"); env != "" && !cmd.Flags().Changed("image-dir") {
				dir = env
			}
			b, where, err := newImageBuilder(driver, dir, stateDir)
			if err != nil {
				return err
			}
			start := time.Now()
			progress := func(m string) { fmt.Fprintln(g.Stderr(), m) }
			name := args[0]
			if len(packages) > 0 {
				pb, ok := b.(packageImageBuilder)
				if !ok {
					return fmt.Errorf("--packages: the %s driver's images take no extra packages", driver)
				}
				name += " +" + strings.Join(packages, ",")
				err = pb.EnsureImagePackages(cmd.Context(), args[0], packages, progress)
			} else {
				err = b.EnsureImage(cmd.Context(), args[0], progress)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout(), "image %s ready in %s (%s)\n", name, where, time.Since(start).Round(time.Second))
			return nil
		},
	}
	f := build.Flags()
	f.StringVar(&driver, "driver", "libvirt", "the driver whose image to build: libvirt or lxc")
	f.StringVar(&dir, "image-dir", filepath.Join(libvirt.DefaultDir, "images"), "libvirt: where the agents of this host find images (env CORPUS_LIBVIRT_IMAGES)")
	f.StringSliceVar(&packages, "packages", nil, "lxc: build the image with these Debian packages installed, as guests created with --packages use it")
	f.StringVar(&stateDir, "state-dir", "/var/lib/corpus/agent", "lxc: the state folder of the agent whose image cache to fill")
	cmd.AddCommand(build)
	return cmd
}

// newImageBuilder returns the named driver, set up to build images, and
// the folder they go to.
func newImageBuilder(driver, imageDir, stateDir string) (imageBuilder, string, error) {
	switch driver {
	case "libvirt":
		if imageDir == "" {
			return nil, "", errors.New("--image-dir is empty")
		}
		abs, err := filepath.Abs(imageDir)
		if err != nil {
			return nil, "", err
		}
		// The driver's guest folder is not used to build an image.
		d, err := libvirt.New(libvirt.Config{Dir: filepath.Join(abs, ".build"), ImageDir: abs})
		if err != nil {
			return nil, "", err
		}
		return d, abs, nil
	case "lxc":
		if stateDir == "" {
			return nil, "", errors.New("--state-dir is empty")
		}
		abs, err := filepath.Abs(stateDir)
		if err != nil {
			return nil, "", err
		}
		// The agent's lxc driver keeps its guests and images here (see
		// drivers/catalog).
		path := filepath.Join(abs, "lxc")
		d, err := lxc.New(lxc.Config{Path: path, Store: os.Getenv("CORPUS_LXC_IMAGE_STORE")})
		if err != nil {
			return nil, "", err
		}
		return d, path, nil
	}
	return nil, "", fmt.Errorf("--driver %q: no such driver with images to build (want libvirt or lxc)", driver)
}
