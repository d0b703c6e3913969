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

// elements are the maps' contents: key to value, each as the kernel
// stores it (concatenated fields padded to 4 bytes), in a string.
type elements [numMaps]map[string]string

func newElements(n int) elements {
	var e elements
	for i := range e {
		e[i] = make(map[string]string, n)
	}
	return e
}

// element is one map entry.
type element struct {
	key, val string
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

// encodeForward returns the map f belongs in and its key and value: the
// host address (only in addrMap), the protocol number and the host port,
// then the guest address and port, each field padded to 4 bytes.
func encodeForward(f Forward) (m int, key, val string) {
	var k []byte
	m = anyMap
	if !anyAddr(f.HostAddr) {
		m = addrMap
		a := f.HostAddr.As4()
		k = append(k, a[:]...)
	}
	k = append(k, protoNumbers[f.Proto], 0, 0, 0)
	k = binary.BigEndian.AppendUint16(k, uint16(f.HostPort))
	k = append(k, 0, 0)
	g := f.GuestAddr.As4()
	v := append(g[:], 0, 0, 0, 0)
	binary.BigEndian.PutUint16(v[4:], uint16(f.GuestPort))
	return m, string(k), string(v)
}

// decodeForward reads an element of map m back. An element corpus would
// not have written (another protocol, a short key) is reported false.
func decodeForward(m int, key, val string) (Forward, bool) {
	var f Forward
	k := []byte(key)
	if m == addrMap {
		if len(k) != 12 {
			return f, false
		}
		f.HostAddr = netip.AddrFrom4([4]byte(k[:4]))
		k = k[4:]
	}
	if len(k) != 8 || len(val) != 8 {
		return f, false
	}
	switch k[0] {
	case 6:
		f.Proto = "tcp"
	case 17:
		f.Proto = "udp"
	default:
		f.Proto = strconv.Itoa(int(k[0]))
	}
	f.HostPort = int(binary.BigEndian.Uint16(k[4:]))
	v := []byte(val)
	f.GuestAddr = netip.AddrFrom4([4]byte(v[:4]))
	f.GuestPort = int(binary.BigEndian.Uint16(v[4:]))
	m2, k2, v2 := encodeForward(f)
	return f, m2 == m && k2 == key && v2 == val
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
