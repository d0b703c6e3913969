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

// newDocsCmd writes the command reference: man pages, which `make deb`
// puts in the package, or Markdown pages, which `make docs` writes to
// docs/reference. Hidden: it is for packagers and the docs.
func newDocsCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:         "docs man|markdown DIR",
		Short:       "Write a man or Markdown page for every command into DIR",
		Hidden:      true,
		Annotations: map[string]string{wholeTree: "true"},
		Args:        cobra.ExactArgs(2),
		ValidArgs:   []string{"man", "markdown"},
		RunE: func(cmd *cobra.Command, args []string) error {
			format, dir := args[0], args[1]
			if format != "man" && format != "markdown" {
				return fmt.Errorf("docs %q: write man or markdown pages (corpus docs man|markdown DIR)", format)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // the same pages from the same binary
			if format == "markdown" {
				if err := doc.GenMarkdownTree(root, dir); err != nil {
					return fmt.Errorf("writing Markdown pages to %s: %w", dir, err)
				}
				fmt.Fprintf(g.stderr, "Markdown pages written to %s\n", dir)
				return nil
			}
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
