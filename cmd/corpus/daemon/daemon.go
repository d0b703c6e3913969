// Package daemon is the corpus commands that run on a cluster's hosts
// and wire its components together: the daemons (coordinator, agent,
// proxy, and dev, which runs a coordinator and an agent in one process)
// and what prepares a host for them (tls ca-create, image build, node
// add-k8s, which builds a driver to check a cluster). The client
// commands (package cli) reach the cluster through the API alone; the
// binary adds these to the same root (cli.Main).
package daemon

import (
	"github.com/spf13/cobra"

	"corpus/cmd/corpus/cli"
)

// Commands returns the hosts' commands, for cli.Main and cli.NewRoot.
// Its node command only carries add-k8s to the client commands' node.
func Commands(g *cli.Globals) []*cobra.Command {
	node := &cobra.Command{Use: "node"}
	node.AddCommand(newNodeAddK8sCmd(g))
	return []*cobra.Command{
		newCoordinatorCmd(g),
		newAgentCmd(g),
		newProxyCmd(g),
		newDevCmd(g),
		newTLSCmd(g),
		newImageCmd(g),
		node,
	}
}
