package nat

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"corpus/netns/internal/nftconn"
)

// Registers as nft uses them for a concatenation: 32-bit registers 8 to
// 11 are the 16-byte register 1, a key starts in it, and a value looked
// up lands in it (the guest address in 8, its port in 9).
const (
	reg1   = unix.NFT_REG_1
	reg32a = unix.NFT_REG32_01
	reg32b = unix.NFT_REG32_02
)

var (
	addrKeyType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	anyKeyType  = nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	targetType  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)
)

// nftTable is the nftables table of the forwards:
//
//	table ip <prefix, lowercased> {
//		map dnat_addr { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service }
//		map dnat_any  { type inet_proto . inet_service : ipv4_addr . inet_service }
//		chain prerouting {
//			type nat hook prerouting priority dstnat; policy accept;
//			fib daddr type != local return
//			dnat ip to ip daddr . meta l4proto . th dport map @dnat_addr
//			dnat ip to meta l4proto . th dport map @dnat_any
//		}
//		chain output {
//			type nat hook output priority -100; policy accept;
//			ip daddr 127.0.0.0/8 return
//			fib daddr type != local return
//			dnat ip to ip daddr . meta l4proto . th dport map @dnat_addr
//			dnat ip to meta l4proto . th dport map @dnat_any
//		}
//	}
//
// A new connection to a forward costs one route lookup and one or two
// hash lookups, however many forwards there are.
type nftTable struct {
	table  *nftables.Table
	maps   [numMaps]*nftables.Set
	chains []*nftables.Chain // prerouting, output

	// known is what the table held after the last write (when that
	// write was the only transaction between the generations before and
	// after it) or read (when none came during it); it stays true while
	// the generation is knownGen: nothing committed since, by anyone.
	known    *observedTable
	knownGen uint32
}

func newNftTable(name string) *nftTable {
	t := &nftables.Table{Name: name, Family: nftables.TableFamilyIPv4}
	policy := nftables.ChainPolicyAccept
	chain := func(name string, hook *nftables.ChainHook) *nftables.Chain {
		return &nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeNAT, Hooknum: hook,
			Priority: nftables.ChainPriorityNATDest, Policy: &policy}
	}
	// Each map's ID names it within a transaction. Set here, as
	// google/nftables would otherwise draw it from a counter of its own
	// that concurrent connections race on.
	m := func(i int, key nftables.SetDatatype) *nftables.Set {
		return &nftables.Set{Table: t, ID: uint32(i + 1), Name: mapNames[i], IsMap: true, Concatenation: true, KeyType: key, DataType: targetType}
	}
	return &nftTable{
		table:  t,
		maps:   [numMaps]*nftables.Set{m(addrMap, addrKeyType), m(anyMap, anyKeyType)},
		chains: []*nftables.Chain{chain("prerouting", nftables.ChainHookPrerouting), chain("output", nftables.ChainHookOutput)},
	}
}

// rules returns each chain's rules: packets to other than a local
// address (and in output, to loopback: a packet from 127.0.0.1 cannot be
// routed to a guest) return, the others are looked up in each map.
func (t *nftTable) rules() [][][]expr.Any {
	notLocal := []expr.Any{
		&expr.Fib{Register: reg1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
	loopback := []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127}},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
	dnat := func(m int, load ...expr.Any) []expr.Any {
		return append(load,
			&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: mapNames[m]},
			// Max as min: what the kernel reports back.
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegAddrMax: reg1,
				RegProtoMin: reg32a, RegProtoMax: reg32a, Specified: true},
		)
	}
	lookups := [][]expr.Any{
		dnat(addrMap,
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg32a},
			&expr.Payload{DestRegister: reg32b, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}),
		dnat(anyMap,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Payload{DestRegister: reg32a, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}),
	}
	return [][][]expr.Any{
		append([][]expr.Any{notLocal}, lookups...),
		append([][]expr.Any{loopback, notLocal}, lookups...),
	}
}

// generation is the ruleset generation of the calling thread's
// namespace (see nftconn.Generation).
func (t *nftTable) generation(ctx context.Context) (uint32, error) {
	return nftconn.Generation(ctx)
}

// passed keeps what the table held at generation before as what it holds
// at after: a transaction that left it alone came between (NAT.Passed).
func (t *nftTable) passed(before, after uint32) {
	if t.known != nil && t.knownGen == before {
		t.knownGen = after
	}
}

// current returns what the table holds at generation gen: what the last
// write or read found when nothing was committed since, or else what
// read finds. The caller must not change it.
func (t *nftTable) current(ctx context.Context, gen uint32) (observedTable, error) {
	if t.known != nil && gen == t.knownGen {
		return *t.known, nil
	}
	t.known = nil
	o, err := t.read(ctx)
	if err != nil {
		return o, err
	}
	if after, err := nftconn.Generation(ctx); err == nil && after == gen && o.whole {
		known := o
		known.read = false
		t.known, t.knownGen = &known, gen
	}
	return o, nil
}

// read observes the table; its elements only when it is whole.
func (t *nftTable) read(ctx context.Context) (observedTable, error) {
	o := observedTable{read: true}
	c, err := nftconn.Dial(ctx)
	if err != nil {
		return o, err
	}
	defer c.CloseLasting()
	have, err := nftconn.ReadTable(c, t.table)
	if err != nil || !have.Exists {
		return o, err
	}
	o.exists = true
	chains := have.Chains
	if len(chains) != len(t.chains) {
		return o, nil
	}
	want := t.rules()
	for i, wc := range t.chains {
		j := slices.IndexFunc(chains, func(c *nftables.Chain) bool { return c.Name == wc.Name })
		if j < 0 || !nftconn.SameChain(chains[j], wc) {
			return o, nil
		}
		rules, err := c.GetRules(t.table, wc)
		if err != nil {
			return o, fmt.Errorf("reading rules of chain %s: %w", wc.Name, err)
		}
		if !nftconn.SameRules(t.table.Family, rules, want[i]) {
			return o, nil
		}
	}
	if ok, err := nftconn.HasSets(c, t.table, t.maps[:]); err != nil || !ok {
		return o, err
	}
	o.whole = true
	o.elems = newElements(0)
	for m, s := range t.maps {
		err := nftconn.Elements(ctx, t.table, s.Name, func(key, val []byte) {
			var k elemKey
			var v elemVal
			if len(key) == keyLen[m] && len(val) == len(v) { // as the map's type says
				copy(k[:], key)
				copy(v[:], val)
				o.elems[m][k] = v
			}
		})
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// write makes the change p asks for in one nftables transaction: when it
// fails nothing changed. It returns the generations before and after;
// after is before+1 when the write was the only transaction between.
func (t *nftTable) write(ctx context.Context, p *Plan) (before, after uint32, err error) {
	t.known = nil
	c, err := nftconn.Dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer c.CloseLasting()
	if before, err = nftconn.Generation(ctx); err != nil {
		return 0, 0, err
	}
	if p.Table {
		if p.table.exists {
			c.DelTable(t.table)
		}
		c.AddTable(t.table)
		for _, s := range t.maps {
			if err := c.AddSet(s, nil); err != nil {
				return 0, 0, fmt.Errorf("adding map %s: %w", s.Name, err)
			}
		}
		for i, ch := range t.chains {
			c.AddChain(ch)
			for _, exprs := range t.rules()[i] {
				c.AddRule(&nftables.Rule{Table: t.table, Chain: ch, Exprs: exprs})
			}
		}
	}
	for m, s := range t.maps {
		// Deleted first: a key whose value changes is in both.
		if err := nftconn.DeleteElements(c, s, setElements(m, p.delElems[m])); err != nil {
			return 0, 0, err
		}
		if err := nftconn.AddElements(c, s, setElements(m, p.addElems[m])); err != nil {
			return 0, 0, err
		}
	}
	if err := c.Flush(); err != nil {
		return 0, 0, fmt.Errorf("writing table ip %s: %w", t.table.Name, err)
	}
	if after, err = nftconn.Generation(ctx); err != nil {
		return 0, 0, err
	}
	if after == before+1 { // only this transaction: the table is what p made
		t.known, t.knownGen = p.result(), after
	}
	return before, after, nil
}

func setElements(m int, es []element) []nftables.SetElement {
	out := make([]nftables.SetElement, len(es))
	for i, e := range es {
		out[i] = nftables.SetElement{Key: e.key[:keyLen[m]], Val: e.val[:]}
	}
	return out
}

// remove deletes the table, and says whether there was one.
func (t *nftTable) remove(ctx context.Context) (bool, error) {
	t.known = nil
	return nftconn.DeleteTable(ctx, t.table)
}

func (t *nftTable) name() string { return t.table.Name }
