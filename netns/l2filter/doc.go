// Package l2filter keeps each guest on a node's bridge to its own
// addresses at layer 2: frames a guest sends through its bridge port must
// carry its MAC, its ARP must claim only its own MAC and IPv4 address,
// and its IPv4 must come from that address. A guest that takes another's
// address and announces it with gratuitous ARP, or changes its own MAC,
// is dropped at its port before the bridge or the node sees the frame,
// so the node's neighbour table (and the proxy behind it) keeps pointing
// every guest's address at that guest. It is also the one place a guest's
// IPv4 source is held to its address: package nat's rules tell guests
// apart by source address and rest on it.
//
// # Table
//
// The filter is one nftables table of the bridge family that corpus owns
// (default name corpus-l2), programmed over netlink:
//
//	table bridge corpus-l2 {
//		set ports { type ifname }                     guest ports
//		set macs  { type ifname . ether_addr }        port -> its MAC
//		set addrs { type ifname . ipv4_addr }         port -> its IPv4
//		chain guests {
//			type filter hook prerouting priority -200; policy accept;
//			iifname != "cg*" accept                   not a guest port (with a port prefix)
//			iifname != @ports counter drop            a guest port corpus does not know
//			iifname . ether saddr != @macs counter drop
//			iifname . arp saddr ether != @macs counter drop
//			iifname . arp saddr ip != @addrs counter drop
//			arp htype 1 arp ptype ip arp hlen 6 arp plen 4 accept
//			iifname . ip saddr != @addrs counter drop
//			ether type ip accept
//			counter drop                              IPv6, VLAN tags, other ARP, anything else
//		}
//	}
//
// Without a port prefix the first two rules are one: iifname != @ports
// accept. The bridge's prerouting hook sees every frame entering from a
// port, whether it is bridged to another port or delivered to the node,
// and priority -200 runs before br_netfilter hands IPv4 to iptables.
//
// Guests get static IPv4 addresses (no DHCP), so no IPv4 from 0.0.0.0 and
// no ARP probe (sender 0.0.0.0) is let through. Guests get no IPv6: every
// IPv6 frame from a guest port is dropped, which also keeps guests from
// reaching each other over link-local IPv6, beneath the IPv4 rules of
// package nat.
//
// # Applying
//
// Apply is level-based. It reads the table, its chain, its sets and their
// elements, and in one netlink batch (one nftables transaction, so no
// frame ever meets half a change) changes only what differs: a missing
// table, or one whose chain or sets are not as corpus writes them, is
// made again whole; rules that differ (a chain flushed by hand) are
// rewritten whole; set elements are added and deleted one by one, so a
// guest more or less among thousands costs three elements. A table that
// is already right is left alone and Apply writes nothing.
//
// Everything runs in the network namespace of the calling OS thread.
package l2filter
