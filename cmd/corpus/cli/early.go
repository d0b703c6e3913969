package cli

import (
	"io"
	"os"
)

// A client command runs from this package's init, not from main. Go
// initialises packages in import path order as their imports are ready,
// and this package imports neither the daemons nor the drivers, so its
// init comes before theirs: the Kubernetes client's schemes, the
// coordinator's and agent's packages, about 25 ms of every command a
// user types, which a client command does not need. The daemons'
// commands (and the help that lists them) are left to main, with the
// whole binary initialised: only a command that is a leaf of the client
// commands' tree runs here.
func init() {
	if len(os.Args) < 2 {
		return
	}
	args := os.Args[1:]
	root := NewRoot(NewGlobals(io.Discard, io.Discard))
	cmd, _, err := root.Find(args)
	if err != nil || cmd == root || cmd.HasSubCommands() || cmd.Name() == "help" || cmd.Name() == "completion" {
		return
	}
	os.Exit(Main(args))
}
