package l2filter

import (
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The names inside the table.
const (
	chainName = "guests"
	portsSet  = "ports"
	macsSet   = "macs"
	addrsSet  = "addrs"
)

// bridgeFilterPriority is NF_BR_PRI_FILTER_BRIDGED, nft's "filter" for the
// bridge family: before br_netfilter (priority 0) hands frames to
// iptables.
const bridgeFilterPriority nftables.ChainPriority = -200

// ifnameLen is IFNAMSIZ: an interface name in a register or a key,
// padded with zeros.
const ifnameLen = 16

// Registers as nft uses them for a concatenation: the interface name
// fills the first 16-byte register, the MAC or address starts the next.
const (
	reg1 = 1
	reg2 = 2
)

var (
	portsType = nftables.TypeIFName
	macsType  = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr)
	addrsType = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)
)

// arpEthernetIPv4 is the fixed start of an ARP packet for IPv4 over
// Ethernet: hardware type 1, protocol 0x0800, lengths 6 and 4.
var arpEthernetIPv4 = []byte{0x00, 0x01, 0x08, 0x00, 0x06, 0x04}

// layout is the table, chain and sets a Filter owns, as it writes them.
type layout struct {
	table *nftables.Table
	chain *nftables.Chain
	sets  []*nftables.Set // ports, macs, addrs
}

func newLayout(table string) layout {
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyBridge}
	policy := nftables.ChainPolicyAccept
	return layout{
		table: t,
		chain: &nftables.Chain{
			Name: chainName, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(bridgeFilterPriority),
			Policy: &policy,
		},
		// Ids of their own: the library would take them from a
		// counter shared, unguarded, by every caller in the process.
		// The names' byte order is the host's, as nft marks string
		// keys, so that `nft list` prints them.
		sets: []*nftables.Set{
			{Table: t, ID: 1, Name: portsSet, KeyType: portsType, KeyByteOrder: binaryutil.NativeEndian},
			{Table: t, ID: 2, Name: macsSet, KeyType: macsType, Concatenation: true},
			{Table: t, ID: 3, Name: addrsSet, KeyType: addrsType, Concatenation: true},
		},
	}
}

// rules are the chain's rules, in order (see the package comment).
func rules(prefix string) [][]expr.Any {
	var out [][]expr.Any
	if prefix != "" {
		out = append(out,
			seq(iifname(reg1), &expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte(prefix)}, accept()),
			seq(iifname(reg1), notIn(portsSet), counted(drop())))
	} else {
		out = append(out, seq(iifname(reg1), notIn(portsSet), accept()))
	}
	out = append(out,
		seq(iifname(reg1), load(expr.PayloadBaseLLHeader, 6, 6, reg2), notIn(macsSet), counted(drop())),
		seq(etherType(unix.ETH_P_ARP), iifname(reg1), load(expr.PayloadBaseNetworkHeader, 8, 6, reg2), notIn(macsSet), counted(drop())),
		seq(etherType(unix.ETH_P_ARP), iifname(reg1), load(expr.PayloadBaseNetworkHeader, 14, 4, reg2), notIn(addrsSet), counted(drop())),
		// Only ARP for IPv4 over Ethernet, whose addresses the two rules
		// above read, is let through; any other falls to the last rule.
		seq(etherType(unix.ETH_P_ARP), load(expr.PayloadBaseNetworkHeader, 0, 6, reg1),
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: arpEthernetIPv4}, accept()),
		seq(etherType(unix.ETH_P_IP), iifname(reg1), load(expr.PayloadBaseNetworkHeader, 12, 4, reg2), notIn(addrsSet), counted(drop())),
		seq(etherType(unix.ETH_P_IP), accept()),
		counted(drop()),
	)
	return out
}

// seq flattens expressions and groups of them into one rule.
func seq(parts ...any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		switch p := p.(type) {
		case expr.Any:
			out = append(out, p)
		case []expr.Any:
			out = append(out, p...)
		}
	}
	return out
}

func iifname(reg uint32) expr.Any { return &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg} }

func load(base expr.PayloadBase, offset, length, reg uint32) expr.Any {
	return &expr.Payload{OperationType: expr.PayloadLoad, Base: base, Offset: offset, Len: length, DestRegister: reg}
}

func etherType(t uint16) []expr.Any {
	return []expr.Any{
		load(expr.PayloadBaseLLHeader, 12, 2, reg1),
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint16(nil, t)},
	}
}

func notIn(set string) expr.Any {
	return &expr.Lookup{SourceRegister: reg1, SetName: set, Invert: true}
}

func counted(verdict expr.Any) []expr.Any { return []expr.Any{&expr.Counter{}, verdict} }

func drop() expr.Any   { return &expr.Verdict{Kind: expr.VerdictDrop} }
func accept() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }

// Keys of the sets' elements.

func ifnameKey(name string) []byte {
	k := make([]byte, ifnameLen)
	copy(k, name)
	return k
}

func portKey(p Port) []byte { return ifnameKey(p.Iface) }

// macKey pads the MAC to the 4-byte register boundary, as concatenated
// keys are.
func macKey(p Port) []byte { return append(append(ifnameKey(p.Iface), p.MAC...), 0, 0) }

func addrKey(p Port) []byte {
	a := p.Addr.As4()
	return append(ifnameKey(p.Iface), a[:]...)
}

// keyIface reads the interface name a key starts with.
func keyIface(k []byte) string {
	if len(k) < ifnameLen {
		return ""
	}
	n := 0
	for n < ifnameLen && k[n] != 0 {
		n++
	}
	return string(k[:n])
}

func keyMAC(k []byte) net.HardwareAddr {
	if len(k) < ifnameLen+6 {
		return nil
	}
	return net.HardwareAddr(append([]byte(nil), k[ifnameLen:ifnameLen+6]...))
}

func keyAddr(k []byte) netip.Addr {
	if len(k) < ifnameLen+4 {
		return netip.Addr{}
	}
	return netip.AddrFrom4([4]byte(k[ifnameLen : ifnameLen+4]))
}
