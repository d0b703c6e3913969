package nftconn

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// elementsPerMessage bounds one netlink message of set elements; a batch
// holds as many messages as it needs.
const elementsPerMessage = 1024

// sendBuffer is the socket buffer a batch is sent through: the whole
// batch goes in one message, and a first write of thousands of elements
// is more than the kernel's default of about 200 KiB.
const sendBuffer = 32 << 20

// Dial opens one netlink socket for a whole call, in the calling
// thread's namespace, that gives up at ctx's deadline. The caller closes
// it with CloseLasting.
func Dial(ctx context.Context) (*nftables.Conn, error) {
	opts := []nftables.SockOption{func(nc *netlink.Conn) error {
		raw, err := nc.SyscallConn()
		if err != nil {
			return err
		}
		return raw.Control(func(fd uintptr) {
			// SO_SNDBUFFORCE passes the system's cap (it needs
			// CAP_NET_ADMIN, as the batch does). Where it fails the
			// default stays, and a batch too large for it fails in
			// Flush with EMSGSIZE, which the caller returns.
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBuffer) != nil {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, sendBuffer)
			}
		})
	}}
	if d, ok := ctx.Deadline(); ok {
		opts = append(opts, func(nc *netlink.Conn) error { return nc.SetDeadline(d) })
	}
	c, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(opts...))
	if err != nil {
		return nil, fmt.Errorf("opening nftables netlink socket: %w", err)
	}
	return c, nil
}

// FindTable returns the table of want's family and name, or nil when
// there is none.
func FindTable(c *nftables.Conn, want *nftables.Table) (*nftables.Table, error) {
	tables, err := c.ListTablesOfFamily(want.Family)
	if err != nil {
		return nil, fmt.Errorf("listing tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == want.Name {
			return t, nil
		}
	}
	return nil, nil
}

// Table is what ReadTable found of a table.
type Table struct {
	Exists bool
	// Active: the table is not dormant (a dormant table's chains see
	// no packet). Chains are read only then.
	Active bool
	Chains []*nftables.Chain
}

// ReadTable looks up table t and, when it is active, lists its chains.
func ReadTable(c *nftables.Conn, t *nftables.Table) (Table, error) {
	have, err := FindTable(c, t)
	if err != nil || have == nil {
		return Table{}, err
	}
	if have.Flags != 0 {
		return Table{Exists: true}, nil
	}
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return Table{}, fmt.Errorf("listing chains of table %s: %w", t.Name, err)
	}
	r := Table{Exists: true, Active: true}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == t.Name {
			r.Chains = append(r.Chains, ch)
		}
	}
	return r, nil
}

// DeleteTable deletes table t with everything in it, in the calling
// thread's namespace, and says whether there was one.
func DeleteTable(ctx context.Context, t *nftables.Table) (bool, error) {
	c, err := Dial(ctx)
	if err != nil {
		return false, err
	}
	defer c.CloseLasting()
	have, err := FindTable(c, t)
	if err != nil || have == nil {
		return false, err
	}
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return false, fmt.Errorf("deleting table %s: %w", t.Name, err)
	}
	return true, nil
}

// SameChain reports whether a base chain read back is want: name, type,
// hook, priority and policy.
func SameChain(have, want *nftables.Chain) bool {
	return have.Name == want.Name && have.Type == want.Type &&
		have.Hooknum != nil && *have.Hooknum == *want.Hooknum &&
		have.Priority != nil && *have.Priority == *want.Priority &&
		have.Policy != nil && *have.Policy == *want.Policy
}

// HasSets reports whether table t holds exactly the sets want: each
// with want's name, key and data types, kind (set or map) and
// concatenation, and none of the flags corpus does not write (interval,
// constant, anonymous, timeout, dynamic).
func HasSets(c *nftables.Conn, t *nftables.Table, want []*nftables.Set) (bool, error) {
	sets, err := c.GetSets(t)
	if err != nil {
		return false, fmt.Errorf("listing sets of table %s: %w", t.Name, err)
	}
	if len(sets) != len(want) {
		return false, nil
	}
	for _, w := range want {
		j := slices.IndexFunc(sets, func(s *nftables.Set) bool { return s.Name == w.Name })
		if j < 0 || !sameSet(sets[j], w) {
			return false, nil
		}
	}
	return true, nil
}

func sameSet(have, want *nftables.Set) bool {
	sameType := func(a, b nftables.SetDatatype) bool { return a.GetNFTMagic() == b.GetNFTMagic() && a.Bytes == b.Bytes }
	return sameType(have.KeyType, want.KeyType) && have.IsMap == want.IsMap &&
		(!want.IsMap || sameType(have.DataType, want.DataType)) && have.Concatenation == want.Concatenation &&
		!have.Interval && !have.Constant && !have.Anonymous && !have.HasTimeout && !have.Dynamic
}

// SameRules compares rules expression by expression as the kernel
// encodes them, counters' values aside.
func SameRules(fam nftables.TableFamily, have []*nftables.Rule, want [][]expr.Any) bool {
	if len(have) != len(want) {
		return false
	}
	for i, r := range have {
		if len(r.Exprs) != len(want[i]) {
			return false
		}
		for j, e := range r.Exprs {
			if _, ok := e.(*expr.Counter); ok {
				e = &expr.Counter{}
			}
			a, err := expr.Marshal(byte(fam), e)
			if err != nil {
				return false
			}
			b, err := expr.Marshal(byte(fam), want[i][j])
			if err != nil || !bytes.Equal(a, b) {
				return false
			}
		}
	}
	return true
}

// AddElements queues elems for adding to s, in messages of a bounded
// size; they are written at the connection's Flush.
func AddElements(c *nftables.Conn, s *nftables.Set, elems []nftables.SetElement) error {
	for chunk := range slices.Chunk(elems, elementsPerMessage) {
		if err := c.SetAddElements(s, chunk); err != nil {
			return fmt.Errorf("adding to set %s: %w", s.Name, err)
		}
	}
	return nil
}

// DeleteElements queues elems for deleting from s, as AddElements does.
func DeleteElements(c *nftables.Conn, s *nftables.Set, elems []nftables.SetElement) error {
	for chunk := range slices.Chunk(elems, elementsPerMessage) {
		if err := c.SetDeleteElements(s, chunk); err != nil {
			return fmt.Errorf("deleting from set %s: %w", s.Name, err)
		}
	}
	return nil
}

// Generation returns the nftables ruleset generation of the calling
// thread's namespace: every committed transaction, corpus's or anyone
// else's (nft, iptables-nft), makes it one more.
func Generation(ctx context.Context) (uint32, error) {
	var gen uint32
	found := false
	err := request(ctx, unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC, nil, func(attrs *netlink.AttributeDecoder) error {
		for attrs.Next() {
			if attrs.Type() == unix.NFTA_GEN_ID {
				gen, found = attrs.Uint32(), true
			}
		}
		return nil
	})
	if err == nil && !found {
		err = errors.New("no generation in the answer")
	}
	if err != nil {
		return 0, fmt.Errorf("reading the nftables generation: %w", err)
	}
	return gen, nil
}

// Elements calls f with the key and value of each element of the set or
// map named set in table t, as the kernel stores them (a set's values
// are empty). f must not keep the slices. It reads the kernel's dump
// directly: google/nftables' GetSetElements decodes every element into
// a SetElement, several times slower at thousands of elements.
func Elements(ctx context.Context, t *nftables.Table, set string, f func(key, val []byte)) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, t.Name)
	ae.String(unix.NFTA_SET_ELEM_LIST_SET, set)
	data, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("reading set %s: %w", set, err)
	}
	err = request(ctx, unix.NFT_MSG_GETSETELEM, netlink.Dump, byte(t.Family), data, func(attrs *netlink.AttributeDecoder) error {
		for attrs.Next() {
			if attrs.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			attrs.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					if list.Type() != unix.NFTA_LIST_ELEM {
						continue
					}
					var key, val []byte
					list.Nested(func(elem *netlink.AttributeDecoder) error {
						for elem.Next() {
							switch elem.Type() {
							case unix.NFTA_SET_ELEM_KEY:
								key = dataValue(elem)
							case unix.NFTA_SET_ELEM_DATA:
								val = dataValue(elem)
							}
						}
						return nil
					})
					f(key, val)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading set %s: %w", set, err)
	}
	return nil
}

// dataValue returns the NFTA_DATA_VALUE nested in the current attribute.
func dataValue(ad *netlink.AttributeDecoder) []byte {
	var v []byte
	ad.Nested(func(d *netlink.AttributeDecoder) error {
		for d.Next() {
			if d.Type() == unix.NFTA_DATA_VALUE {
				v = d.Bytes()
			}
		}
		return nil
	})
	return v
}

// request sends one nftables request of type msg on a socket of its own
// in the calling thread's namespace and calls f with the attributes of
// each answer.
func request(ctx context.Context, msg uint16, flags netlink.HeaderFlags, family byte, attrs []byte, f func(*netlink.AttributeDecoder) error) error {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return fmt.Errorf("opening netfilter netlink socket: %w", err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(d); err != nil {
			return err
		}
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msg), Flags: netlink.Request | flags},
		Data:   append([]byte{family, unix.NFNETLINK_V0, 0, 0}, attrs...), // nfgenmsg, then the attributes
	})
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return err
		}
		ad.ByteOrder = binary.BigEndian
		if err := f(ad); err != nil {
			return err
		}
		if err := ad.Err(); err != nil {
			return err
		}
	}
	return nil
}
