package nat

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// The forwards live in two maps of the nftables table: one keyed by the
// node address, protocol and port (forwards bound to one address), one
// by protocol and port (forwards on every local address). Desired.Validate
// keeps the two from claiming the same packet.
const (
	addrMap = iota
	anyMap
	numMaps
)

// mapNames are the maps' names in the table, by index.
var mapNames = [numMaps]string{"dnat_addr", "dnat_any"}

// elemKey is a map key as the kernel stores it (concatenated fields
// padded to 4 bytes): the node address, the protocol number and the
// host port in addrMap; the protocol number and the host port, then
// zeros, in anyMap. elemVal is a value: the guest's address and port.
type (
	elemKey [12]byte
	elemVal [8]byte
)

// keyLen is the length of each map's keys.
var keyLen = [numMaps]int{12, 8}

// elements are the maps' contents.
type elements [numMaps]map[elemKey]elemVal

func newElements(n int) elements {
	var e elements
	for i := range e {
		e[i] = make(map[elemKey]elemVal, n)
	}
	return e
}

// element is one map entry.
type element struct {
	key elemKey
	val elemVal
}

// forwardElements returns the elements that publish fs. fs must be valid.
func forwardElements(fs []Forward) elements {
	e := newElements(len(fs))
	for _, f := range fs {
		m, k, v := encodeForward(f)
		e[m][k] = v
	}
	return e
}

var protoNumbers = map[string]byte{"tcp": 6, "udp": 17}

// encodeForward returns the map f belongs in and its key and value.
func encodeForward(f Forward) (m int, k elemKey, v elemVal) {
	m, rest := anyMap, k[:]
	if !anyAddr(f.HostAddr) {
		m = addrMap
		a := f.HostAddr.As4()
		rest = rest[copy(rest, a[:]):]
	}
	rest[0] = protoNumbers[f.Proto]
	binary.BigEndian.PutUint16(rest[4:], uint16(f.HostPort))
	g := f.GuestAddr.As4()
	copy(v[:], g[:])
	binary.BigEndian.PutUint16(v[4:], uint16(f.GuestPort))
	return m, k, v
}

// decodeForward reads an element of map m back. An element corpus would
// not have written (another protocol, padding set) is reported false.
func decodeForward(m int, k elemKey, v elemVal) (Forward, bool) {
	var f Forward
	rest := k[:]
	if m == addrMap {
		f.HostAddr = netip.AddrFrom4([4]byte(rest[:4]))
		rest = rest[4:]
	}
	switch rest[0] {
	case 6:
		f.Proto = "tcp"
	case 17:
		f.Proto = "udp"
	default:
		f.Proto = strconv.Itoa(int(rest[0]))
	}
	f.HostPort = int(binary.BigEndian.Uint16(rest[4:]))
	f.GuestAddr = netip.AddrFrom4([4]byte(v[:4]))
	f.GuestPort = int(binary.BigEndian.Uint16(v[4:]))
	m2, k2, v2 := encodeForward(f)
	return f, m2 == m && k2 == k && v2 == v
}

// diffElements returns, map by map, the elements of have to delete (not
// wanted, or wanted with another value) and those of want to add.
func diffElements(have, want elements) (del, add [numMaps][]element) {
	for m := range numMaps {
		for k, v := range have[m] {
			if w, ok := want[m][k]; !ok || w != v {
				del[m] = append(del[m], element{k, v})
			}
		}
		for k, v := range want[m] {
			if h, ok := have[m][k]; !ok || h != v {
				add[m] = append(add[m], element{k, v})
			}
		}
	}
	return del, add
}

// observedTable is what the forwards' nftables table holds.
type observedTable struct {
	exists bool
	// whole: the table, its chains, rules and maps are as corpus writes
	// them (the elements may still differ).
	whole bool
	elems elements
	// read: found by reading the table back, not known from the last
	// write.
	read bool
}

// forwards decodes the elements; those corpus would not have written
// are left out.
func (o observedTable) forwards() []Forward {
	var out []Forward
	for m := range numMaps {
		for k, v := range o.elems[m] {
			if f, ok := decodeForward(m, k, v); ok {
				out = append(out, f)
			}
		}
	}
	return out
}
