// Package proxy is the agent's proxy ingress: the way outside traffic
// reaches guests when a guest port uses the `proxy` ingress mode.
//
// A [Proxy] serves three kinds of listeners:
//
//   - HTTP (default :80): requests are routed by their Host header
//     (case-insensitive, port ignored) to one of the route's targets,
//     round-robin, with keep-alive to clients and to targets, websocket
//     upgrades, and bodies streamed both ways without buffering.
//   - HTTPS (optional): the same routing behind TLS, with certificates
//     loaded from PEM files and picked by SNI.
//   - TCP: one listener per TCP route, each copying bytes to and from the
//     route's target.
//
// Routes are data. [Proxy.SetRoutes] validates a whole [Routes] value and
// swaps it in atomically; every request and every TCP connection resolves
// its target once, when it starts. A request in flight when routes change
// finishes on the target it started on, and the next one goes to the new
// target, so moving a host from one guest to another never fails a request:
//
//	request starts ──> table.Load() ──> route ──> target (fixed for the request)
//	SetRoutes      ──> validate ──> copy ──> table.Store() ──> open/close TCP listeners
//
// Most HTTP/1.1 requests take a lean path of the proxy's own (h1conn.go,
// heads parsed by package h1):
// one goroutine per client connection, keep-alive connection pools per
// target, no allocation per request, bodies streamed (spliced between TCP
// sockets when large). A connection whose request is anything else
// (HTTP/1.0, an upgrade, Expect, an unusual header, a host with no route)
// and every HTTP/2 connection is handed over to net/http's server and
// httputil.ReverseProxy, with the same routes, headers and answers.
//
// The proxy answers by itself only in these cases: 404 when no route matches
// the Host header, 502 when no target of the route could be connected to (or
// a target broke the exchange), and 504 when a target accepted the request but
// did not send response headers in time.
package proxy
