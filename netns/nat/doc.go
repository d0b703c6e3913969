// Package nat programs the kernel NAT that publishes guest ports on a node
// and lets guests reach the outside: the forwards in an nftables table
// corpus owns, the rest in iptables chains corpus owns.
//
// # Forwards
//
// The published ports are elements of two nftables maps in the table
// "ip <prefix, lowercased>" ("ip corpus"), written over netlink: one
// keyed by node address, protocol and port (forwards bound to one
// address), one by protocol and port (forwards on every local address),
// each giving the guest's address and port. Its nat chains at prerouting
// (traffic from outside and from guests) and output (traffic from the
// node to its own addresses, loopback aside) send packets to a local
// address through a DNAT looked up in those maps (see nftTable). A new
// connection costs the same with 10 forwards or 10,000, and publishing or
// withdrawing a port is one element added or deleted.
//
// # Chains
//
// With the default prefix CORPUS:
//
//	nat    POSTROUTING -j CORPUS-POSTROUTING
//	filter FORWARD     -j CORPUS-FORWARD
//	filter INPUT       -j CORPUS-INPUT
//
//	CORPUS-POSTROUTING  per subnet: RETURN (keep the source) for traffic to
//	                    other nodes' guest subnets (peers), MASQUERADE guest
//	                    traffic that leaves by another interface than the
//	                    bridge, and hairpin traffic (ctstate DNAT from the
//	                    subnet to the subnet)
//	CORPUS-FORWARD      ACCEPT established/related and DNATed traffic to the
//	                    bridge (published ports); DROP peers' guests'
//	                    traffic to the bridge (sealed guests' rules, before,
//	                    let the linked ones in); DROP guests' traffic to
//	                    blocked endpoints (the control plane); ACCEPT
//	                    guest-to-guest traffic inside a group (a project),
//	                    DROP any other; ACCEPT the rest from the bridge
//	CORPUS-INPUT        for traffic from the bridge to the node itself:
//	                    ACCEPT established/related, ICMP and the node
//	                    ports (resolver, proxy); DROP the rest (agent,
//	                    git, metrics, coordinator, ssh, ...)
//
// Guests on one bridge exchange frames without routing; they meet these
// rules because br_netfilter hands bridged frames to iptables, which
// netns.Host.EnsureBridge turns on (bridge-nf-call-iptables). A chain is
// written whole when it differs (first match wins there).
//
// corpus owns its table, the chains named <prefix>-*, every rule in them,
// and the rules of the built-in chains that jump to them; it never edits
// or deletes any other rule. Chains under the prefix that it no longer
// writes (CORPUS-PREROUTING, CORPUS-OUTPUT and CORPUS-DNAT, where an
// earlier version kept one DNAT rule per forward) are deleted with their
// jumps, after the table publishes the forwards. The jumps are inserted at the top of the built-in chains,
// once each. Their drops are only for traffic from corpus's bridge;
// whatever the node's own policy drops stays dropped for traffic that is
// not corpus's.
//
// IPv4 forwarding and hairpin mode on the bridge's ports (needed for a
// guest reaching its own published port when br_netfilter is on) are set
// by netns.Host.EnsureBridge, not here.
//
// Loopback destinations are not forwarded: a packet from 127.0.0.1 cannot
// be routed to a guest (route_localnet is left off), so the node reaches a
// published port through one of its own addresses.
//
// # Applying
//
// Apply is level-based and restart-safe. It reads the nat and filter tables
// once each with iptables-save, parses only corpus's chains and the jumps
// to them, compares them with the rules Desired asks for, and writes the
// chains that differ in one iptables-restore --noflush batch. Missing or
// duplicate jumps are fixed with single go-iptables calls. It reads the
// table back and writes the elements that differ in one nftables
// transaction; a table whose chains, rules or maps are not as corpus
// writes them is made anew in that transaction. Someone flushing a chain
// or a map, or deleting a jump or the table by hand, is repaired on the
// next Apply; an Apply on a host that is already right writes nothing.
//
// Everything runs in the network namespace of the calling OS thread; the
// agent calls it from the node's namespace. Only IPv4 is handled.
package nat
