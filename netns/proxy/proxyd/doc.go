// Package proxyd runs a node's proxy ingress ([proxy.Proxy]) as a
// process of its own, `corpus proxy`, so that ingress outlives the agent:
// an agent restart, crash or upgrade leaves every route serving, and the
// next agent adopts the running proxy.
//
// A proxy process keeps a folder (the agent's <state>/proxy):
//
//	control.sock   HTTP over a unix socket: the agent's calls
//	               (GET /status, GET|PUT /routes, GET /inflight,
//	               GET /metrics)
//	handover.sock  where a successor takes the listeners over
//	routes.json    the routes last set, so a proxy started after a crash
//	               serves them before any agent calls
//	proxy.pid      the process serving now
//	proxy.log      its log, when an agent started it
//
// Upgrading the proxy itself drops nothing, as HAProxy's and Envoy's hot
// restarts do: the new process (`corpus proxy --takeover`) connects to
// handover.sock; the old one sends copies of its listening sockets
// (SCM_RIGHTS) and its routes; the new one serves on them, takes the
// socket paths over and says ready; the old one then stops accepting and
// lets the connections it has (requests, websockets, TCP streams) finish,
// up to the drain timeout. The listening sockets never close between the
// two, so no connection is refused. A successor that fails before it says
// ready leaves the old process serving as before.
//
// [Client] is the agent's side: it starts a proxy process when none
// answers, takes one over when its version differs from the agent's,
// sets routes, and sends them again to a process that restarted.
package proxyd
