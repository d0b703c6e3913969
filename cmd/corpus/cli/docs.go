package cli

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"corpus/internal/version"
)

// newDocsCmd writes the command reference; `make deb` puts its man pages
// in the package. Hidden: it is for packagers.
func newDocsCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:    "docs man DIR",
		Short:  "Write a man page for every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "man" {
				return fmt.Errorf("docs %q: only man pages are made (corpus docs man DIR)", args[0])
			}
			dir := args[1]
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // the same pages from the same binary
			hdr := &doc.GenManHeader{Title: "CORPUS", Section: "1", Source: "corpus " + version.Version, Manual: "corpus manual"}
			// Dated by the commit, not the build, when the packager says so.
			if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
				sec, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", s)
				}
				d := time.Unix(sec, 0).UTC()
				hdr.Date = &d
			}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return fmt.Errorf("writing man pages to %s: %w", dir, err)
			}
			fmt.Fprintf(g.stderr, "man pages written to %s\n", dir)
			return nil
		},
	}
}
