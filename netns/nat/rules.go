package nat

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Chain names an iptables chain in a table.
type Chain struct {
	Table string // "nat" or "filter"
	Name  string
}

func (c Chain) String() string { return c.Table + "/" + c.Name }

// Table names, in the order batches write them.
var tables = []string{"nat", "filter"}

// builtins are the built-in chains of each table whose jumps to corpus's
// chains corpus owns.
var builtins = map[string][]string{
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
}

// layout is the set of chains and jumps for one prefix.
type layout struct {
	prefix      string
	postrouting Chain
	forward     Chain
	input       Chain
	jumps       []Jump
}

// Jump is a rule in a built-in chain that jumps to one of corpus's chains.
type Jump struct {
	Chain
	// Rule is the rule as iptables-save prints it after "-A <chain> ".
	Rule string
}

func newLayout(prefix string) layout {
	c := func(table, suffix string) Chain { return Chain{table, prefix + "-" + suffix} }
	l := layout{
		prefix:      prefix,
		postrouting: c("nat", "POSTROUTING"),
		forward:     c("filter", "FORWARD"),
		input:       c("filter", "INPUT"),
	}
	l.jumps = []Jump{
		{Chain{"nat", "POSTROUTING"}, "-j " + l.postrouting.Name},
		{Chain{"filter", "FORWARD"}, "-j " + l.forward.Name},
		{Chain{"filter", "INPUT"}, "-j " + l.input.Name},
	}
	return l
}

// chains lists corpus's chains in creation order. Other chains under the
// prefix are stale (an earlier version's PREROUTING, OUTPUT and DNAT,
// before the forwards moved to nftables maps): Apply deletes them.
func (l layout) chains() []Chain {
	return []Chain{l.postrouting, l.forward, l.input}
}

// owned reports whether a chain name is under corpus's prefix.
func (l layout) owned(name string) bool {
	return strings.HasPrefix(name, l.prefix+"-")
}

// render returns the rules d asks for in each of corpus's chains, written
// exactly as iptables-save prints them, so that comparing text compares
// rules. d must be valid.
func (l layout) render(d Desired) map[Chain][]string {
	out := map[Chain][]string{}
	peers := slices.Clone(d.Peers)
	slices.SortFunc(peers, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	peers = slices.Compact(peers)
	post := make([]string, 0, (2+len(peers))*len(d.Subnets))
	for _, s := range d.Subnets {
		for _, p := range peers {
			post = append(post, "-s "+s.String()+" -d "+p.String()+" -j RETURN")
		}
		post = append(post,
			"-s "+s.String()+" -d "+s.String()+" -m conntrack --ctstate DNAT -j MASQUERADE",
			"-s "+s.String()+" ! -o "+d.Bridge+" -j MASQUERADE")
	}
	out[l.postrouting] = post

	fwd := []string{"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"}
	var in []string
	if d.Bridge != "" {
		br := d.Bridge
		// A sealed guest is reached by the addresses it names, on its
		// port, and by nothing else (other guests, other nodes, the
		// outside, a published port): before the rules that could let
		// them in otherwise.
		sealed := slices.Clone(d.Sealed)
		slices.SortFunc(sealed, func(a, b Sealed) int { return a.Addr.Compare(b.Addr) })
		var seal []string
		for _, sg := range sealed {
			from := slices.Clone(sg.From)
			slices.SortFunc(from, netip.Addr.Compare)
			for _, a := range slices.Compact(from) {
				seal = append(seal, "-s "+a.String()+"/32 -d "+sg.Addr.String()+"/32 -o "+br+" -p tcp -m tcp --dport "+strconv.Itoa(sg.Port)+" -j ACCEPT")
			}
			seal = append(seal, "-d "+sg.Addr.String()+"/32 -o "+br+" -j DROP")
		}
		fwd = append(fwd, seal...)
		fwd = append(fwd, "-o "+br+" -m conntrack --ctstate DNAT -j ACCEPT")
		// Other nodes' guests reach ours only as sealed above allows, or
		// through published ports (DNAT, above).
		for _, p := range peers {
			fwd = append(fwd, "-s "+p.String()+" -o "+br+" -j DROP")
		}
		for _, ap := range sortedAddrPorts(d.Blocked) {
			fwd = append(fwd, "-d "+ap.Addr().String()+"/32 -i "+br+" -p tcp -m tcp --dport "+strconv.Itoa(int(ap.Port()))+" -j DROP")
		}
		for _, g := range d.Groups {
			members := slices.Clone(g)
			slices.SortFunc(members, netip.Addr.Compare)
			members = slices.Compact(members)
			for _, a := range members {
				for _, b := range members {
					if a != b {
						fwd = append(fwd, "-s "+a.String()+"/32 -d "+b.String()+"/32 -i "+br+" -o "+br+" -j ACCEPT")
					}
				}
			}
		}
		fwd = append(fwd, "-i "+br+" -o "+br+" -j DROP", "-i "+br+" -j ACCEPT")

		in = append(in, "! -i "+br+" -j RETURN")
		in = append(in, "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
			"-p icmp -j ACCEPT")
		for _, np := range sortedNodePorts(d.NodePorts) {
			in = append(in, "-p "+np.Proto+" -m "+np.Proto+" --dport "+strconv.Itoa(np.Port)+" -j ACCEPT")
		}
		in = append(in, "-j DROP")
	}
	out[l.forward] = fwd
	out[l.input] = in
	return out
}

func sortedAddrPorts(aps []netip.AddrPort) []netip.AddrPort {
	out := slices.Clone(aps)
	slices.SortFunc(out, netip.AddrPort.Compare)
	return slices.Compact(out)
}

func sortedNodePorts(ps []NodePort) []NodePort {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b NodePort) int {
		if c := strings.Compare(a.Proto, b.Proto); c != 0 {
			return c
		}
		return a.Port - b.Port
	})
	return slices.Compact(out)
}
