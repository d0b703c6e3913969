package nat

import (
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
	prerouting  Chain
	output      Chain
	dnat        Chain
	postrouting Chain
	forward     Chain
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
		prerouting:  c("nat", "PREROUTING"),
		output:      c("nat", "OUTPUT"),
		dnat:        c("nat", "DNAT"),
		postrouting: c("nat", "POSTROUTING"),
		forward:     c("filter", "FORWARD"),
	}
	l.jumps = []Jump{
		{Chain{"nat", "PREROUTING"}, "-m addrtype --dst-type LOCAL -j " + l.prerouting.Name},
		{Chain{"nat", "OUTPUT"}, "-m addrtype --dst-type LOCAL -j " + l.output.Name},
		{Chain{"nat", "POSTROUTING"}, "-j " + l.postrouting.Name},
		{Chain{"filter", "FORWARD"}, "-j " + l.forward.Name},
	}
	return l
}

// chains lists corpus's chains in creation order: a chain is created
// before the chains that jump to it.
func (l layout) chains() []Chain {
	return []Chain{l.dnat, l.prerouting, l.output, l.postrouting, l.forward}
}

// owned reports whether a chain name is under corpus's prefix.
func (l layout) owned(name string) bool {
	return strings.HasPrefix(name, l.prefix+"-")
}

// render returns the rules d asks for in each of corpus's chains, written
// exactly as iptables-save prints them, so that comparing text compares
// rules. d must be valid.
func (l layout) render(d Desired) map[Chain][]string {
	out := map[Chain][]string{
		l.prerouting: {"-j " + l.dnat.Name},
		l.output:     {"! -d 127.0.0.0/8 -j " + l.dnat.Name},
	}

	fwds := slices.Clone(d.Forwards)
	slices.SortFunc(fwds, compareForwards)
	dnat := make([]string, 0, len(fwds))
	var b strings.Builder
	for _, f := range fwds {
		dnat = append(dnat, forwardRule(&b, f))
	}
	out[l.dnat] = dnat

	post := make([]string, 0, 2*len(d.Subnets))
	for _, s := range d.Subnets {
		post = append(post,
			"-s "+s.String()+" -d "+s.String()+" -m conntrack --ctstate DNAT -j MASQUERADE",
			"-s "+s.String()+" ! -o "+d.Bridge+" -j MASQUERADE")
	}
	out[l.postrouting] = post

	fwd := []string{"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"}
	if d.Bridge != "" {
		fwd = append(fwd,
			"-o "+d.Bridge+" -m conntrack --ctstate DNAT -j ACCEPT",
			"-i "+d.Bridge+" -j ACCEPT")
	}
	out[l.forward] = fwd
	return out
}

// forwardRule writes f as the DNAT rule iptables-save prints.
func forwardRule(b *strings.Builder, f Forward) string {
	b.Reset()
	if !anyAddr(f.HostAddr) {
		b.WriteString("-d ")
		b.WriteString(f.HostAddr.String())
		b.WriteString("/32 ")
	}
	b.WriteString("-p ")
	b.WriteString(f.Proto)
	b.WriteString(" -m ")
	b.WriteString(f.Proto)
	b.WriteString(" --dport ")
	b.WriteString(strconv.Itoa(f.HostPort))
	b.WriteString(" -j DNAT --to-destination ")
	b.WriteString(f.GuestAddr.String())
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(f.GuestPort))
	return b.String()
}
