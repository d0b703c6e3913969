// Package sshd is a node's SSH endpoint, the one git pushes go to: it
// checks keys against the users the coordinator knows and runs one
// command per session, a git one (the agent's deploy pipeline serves it)
// or a shell in a project's guest (agent/shell). It reaches the rest of
// the agent through Host.
package sshd
