package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"corpus/drivers/libvirt"
)

// newImageCmd builds a node's VM images ahead of its guests: where the
// agent has no route to the Debian mirror, or to have the first VM boot
// at once.
func newImageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Guest images of this host"}
	var dir string
	build := &cobra.Command{
		Use:   "build IMAGE [--image-dir DIR]",
		Short: "Build a libvirt VM image on this host (idempotent; waits for a build in progress)",
		Example: `  corpus image build debian/bookworm
  CORPUS_LIBVIRT_IMAGES=/srv/images corpus image build debian/bookworm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return errors.New("--image-dir is empty")
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			// The driver's guest folder is not used to build an image.
			d, err := libvirt.New(libvirt.Config{Dir: filepath.Join(abs, ".build"), ImageDir: abs})
			if err != nil {
				return err
			}
			start := time.Now()
			if err := d.EnsureImage(cmd.Context(), args[0], func(m string) { fmt.Fprintln(g.stderr, m) }); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "image %s ready in %s (%s)\n", args[0], abs, time.Since(start).Round(time.Second))
			return nil
		},
	}
	def := os.Getenv("CORPUS_LIBVIRT_IMAGES")
	if def == "" {
		def = filepath.Join(libvirt.DefaultDir, "images")
	}
	build.Flags().StringVar(&dir, "image-dir", def, "where the agents of this host find images (env CORPUS_LIBVIRT_IMAGES)")
	cmd.AddCommand(build)
	return cmd
}
