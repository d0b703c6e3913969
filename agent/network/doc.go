// Package network is a node's guest networking: the bridge guests join,
// the layer-2 filter that holds each guest to its MAC and address, the
// NAT rules that publish their ports, the guests' resolver and the proxy
// in front of their routes, and the routes drivers publish themselves.
// The agent's reconcile loop hands it the desired state each pass
// (Reconcile); guest workers ask it where a guest sits (GuestNetwork).
package network
