// Command corpus is the one corpus binary: the coordinator, the node agent,
// the one-machine development cluster and the client commands.
package main

import (
	"os"

	"corpus/cmd/corpus/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
