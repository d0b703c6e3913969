// Command corpus is the one corpus binary: the coordinator, the node agent,
// the one-machine development cluster and the client commands.
package main

import (
	"os"

	// git-receive-pack runs `corpus git-hook pre-receive` in the agent's
	// repositories (not a user command): the package answers it from
	// its init, before the rest of the binary initialises.
	_ "corpus/agent/deploy/githook"
	"corpus/cmd/corpus/cli"
	"corpus/cmd/corpus/daemon"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], daemon.Commands))
}
