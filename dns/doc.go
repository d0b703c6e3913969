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
// A query to the Server goes through these steps (the full path):
//
//	packet ─▶ header check ─▶ rate limit (UDP) ─▶ TSIG check ─▶ opcode ─▶ AXFR/IXFR (TCP, ACL)
//	                                                                  └▶ lookup ─▶ EDNS0 ─▶ truncate (UDP)
//
// # The UDP fast path
//
// Most UDP queries never reach that path. The server binds several UDP
// sockets to its address with SO_REUSEPORT (Config.UDPSockets, GOMAXPROCS
// by default), each read by one goroutine, and that goroutine answers
// plain queries itself, without miekg/dns unpacking or packing and without
// allocating (but for the rate limiter's bucket of a new source):
//
//	packet ─▶ parse header, question, OPT by hand ─▶ table lookup ─▶ rate limit ─▶ copy answer ─▶ send
//	               │ anything unusual                    │ no ready answer
//	               └──────────────────────────────────────┴──▶ copy of the packet to the full path
//
// The table (answerTable) maps every name of the zone, lowercase in wire
// format, to ready answers per query type: the packed output of
// Zone.Answer, NODATA and NXDOMAIN with their SOA included. It is built
// when the server starts and again, off the query path, each time the
// source's zone changes, then swapped in atomically; a query that finds
// the table behind the source's zone takes the full path. The answer is
// the query's ID, RD and CD bits and question (so its spelling) put in
// front of the ready sections, plus the OPT record when the query had one.
//
// The full path keeps everything else: TCP, TSIG, zone transfers, NOTIFY
// and other opcodes, ANY, EDNS0 versions other than 0 and options it
// parses with more care (client subnet, ...), classes other than IN, names
// outside the zone, malformed packets, answers that need truncating, and
// questions whose spelling would change how the answer compresses (a
// mixed-case question for anything but a plain A, AAAA or TXT answer).
// Both paths count queries in the same atomic counters and take from the
// same rate limiter, once per query. The tests compare the two paths' bytes
// for a table of queries, for generated ones and under a fuzzer.
package dns
