package cli

import (
	"io"
	"os"
)

// A client command runs from this package's init, not from main. Go
// initialises packages in import path order as their imports are ready,
// and this package imports neither the daemons nor the drivers, so its
// init comes before theirs: the Kubernetes client's schemes, the
// coordinator's and agent's packages, about 15 ms of every command a
// user types, which a client command does not need. The daemons'
// commands (and the help that lists them) are left to main, with the
// whole binary initialised: only a command that is a leaf of the client
// commands' tree runs here, unless it reads the whole tree (wholeTree).
func init() {
	if args := os.Args[1:]; runsEarly(args) {
		os.Exit(Main(args))
	}
}

// runsEarly says whether the command args name runs from init.
func runsEarly(args []string) bool {
	if len(args) == 0 {
		return false
	}
	root := NewRoot(NewGlobals(io.Discard, io.Discard))
	cmd, _, err := root.Find(args)
	return err == nil && cmd != root && !cmd.HasSubCommands() && cmd.Annotations[wholeTree] == "" &&
		cmd.Name() != "help" && cmd.Name() != "completion"
}

// wholeTree annotates a client command that reads every command, the
// daemons' too (docs): it runs from main.
const wholeTree = "corpus.whole-tree"
