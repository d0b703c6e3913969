// Package dns serves the cluster's DNS zone.
//
// Two servers live here, and they never share a listener:
//
//   - Server is the authoritative server a coordinator runs. It answers for
//     one zone (corpus.test. by default) from a RecordSource, over UDP and
//     TCP, never recurses, refuses names outside its zone, rate-limits UDP
//     responses per source address, serves AXFR/IXFR to configured
//     secondaries (optionally TSIG-signed) and sends them NOTIFY when the
//     serial changes.
//   - Resolver is the forwarding resolver an agent runs on a guest bridge.
//     It answers the cluster zone through a pluggable dns.Handler (for
//     example ZoneHandler over a RecordSource, or a Forwarder pointed at a
//     coordinator) and forwards every other name to upstream servers.
//
// Records come from a RecordSource: an immutable Zone snapshot plus a channel
// closed when a newer snapshot exists. StaticSource is the in-memory source;
// NewZone builds a Zone from plain Record values and ClusterRecords turns the
// cluster's guests, nodes and routes into records.
//
// A query to the Server goes through these steps:
//
//	packet ─▶ header check ─▶ rate limit (UDP) ─▶ TSIG check ─▶ opcode ─▶ AXFR/IXFR (TCP, ACL)
//	                                                                  └▶ lookup ─▶ EDNS0 ─▶ truncate (UDP)
package dns
