// Command corpus is the one corpus binary: the coordinator, the node agent,
// the one-machine development cluster and the client commands.
package main

import (
	"os"

	"corpus/agent/deploy/githook"
	"corpus/cmd/corpus/cli"
	"corpus/cmd/corpus/daemon"
)

func main() {
	// git-receive-pack runs `corpus git-hook pre-receive` in the agent's
	// repositories; it is not a user command.
	if len(os.Args) == 3 && os.Args[1] == "git-hook" && os.Args[2] == "pre-receive" {
		os.Exit(githook.Run(os.Stdin, os.Stdout))
	}
	os.Exit(cli.Main(os.Args[1:], daemon.Commands))
}
