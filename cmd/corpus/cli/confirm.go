package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// errNotConfirmed is a destructive command's refusal: it was not
// confirmed, and nothing was changed.
var errNotConfirmed = errors.New("not confirmed")

// addYes adds --yes (-y), the confirmation of a destructive command given
// ahead, for scripts.
func addYes(cmd *cobra.Command, yes *bool) {
	cmd.Flags().BoolVarP(yes, "yes", "y", false, "do it without asking (needed when stdin is not a terminal)")
}

// confirm asks before a destructive command: "Delete project site, ...?
// [y/N]" on stderr, answered on the terminal its stdin is. With yes it
// asks nothing. Without a terminal to ask on (a script, a pipe; --json
// too, which confirms nothing) it refuses at once, saying how to
// confirm. Either refusal wraps errNotConfirmed and changed nothing.
func (g *Globals) confirm(cmd *cobra.Command, yes bool, question string) error {
	if yes {
		return nil
	}
	in, ok := cmd.InOrStdin().(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return fmt.Errorf("%w: %s? stdin is not a terminal to ask on; confirm with --yes (nothing was changed)", errNotConfirmed, question)
	}
	fmt.Fprintf(g.stderr, "%s? [y/N] ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(g.stderr)
		return fmt.Errorf("%w: no answer (nothing was changed)", errNotConfirmed)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("%w: the answer was %q, not yes (nothing was changed)", errNotConfirmed, strings.TrimSpace(line))
}
