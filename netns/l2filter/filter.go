package l2filter

import (
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// DefaultTable names the table corpus owns.
const DefaultTable = "corpus-l2"

// Config configures a Filter.
type Config struct {
	// Table is the name of the bridge-family table corpus owns: letters,
	// digits, '-' and '_', starting with a letter, at most 64 bytes.
	// Empty means DefaultTable.
	Table string
	// PortPrefix starts the names of the bridge ports guests hang off
	// (the agent names them cg<guest id>). Frames from a port with that
	// prefix that is not among the ports Apply was given are dropped: a
	// guest started before its ports reached the filter, or one left
	// behind, sends nothing. Empty lets unknown ports through.
	PortPrefix string
	// Logger receives one record per Apply or Remove that changed the
	// table; nil discards them.
	Logger *slog.Logger
}

// Validate returns nil or an error wrapping ErrInvalid.
func (c Config) Validate() error {
	if t := c.Table; t != "" {
		if len(t) > 64 {
			return fmt.Errorf("%w: table name %q is longer than 64 bytes", ErrInvalid, t)
		}
		for i, r := range t {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && (r >= '0' && r <= '9' || r == '-' || r == '_') {
				continue
			}
			return fmt.Errorf("%w: table name %q: use letters, digits, '-' and '_', starting with a letter", ErrInvalid, t)
		}
	}
	if c.PortPrefix != "" {
		if err := validIfName(c.PortPrefix); err != nil {
			return fmt.Errorf("port prefix: %w", err)
		}
	}
	return nil
}

// Port is a guest's port on the bridge and what the guest behind it may
// claim to be.
type Port struct {
	// Iface is the node's end of the guest's link (a veth or tap).
	Iface string
	// MAC is the guest interface's hardware address: a unicast
	// Ethernet address.
	MAC net.HardwareAddr
	// Addr is the guest's IPv4 address.
	Addr netip.Addr
}

func (p Port) String() string { return p.Iface + "=" + p.MAC.String() + "/" + p.Addr.String() }

// validatePorts returns nil, an error wrapping ErrInvalid for a malformed
// port, or one wrapping ErrConflict when two ports share an interface,
// a MAC or an address.
func validatePorts(ports []Port) error {
	ifaces := make(map[string]bool, len(ports))
	macs := make(map[string]string, len(ports))
	addrs := make(map[netip.Addr]string, len(ports))
	for _, p := range ports {
		if err := validIfName(p.Iface); err != nil {
			return err
		}
		switch {
		case len(p.MAC) != 6:
			return fmt.Errorf("%w: port %s: MAC %q is not an Ethernet address", ErrInvalid, p.Iface, p.MAC)
		case p.MAC[0]&1 != 0:
			return fmt.Errorf("%w: port %s: MAC %s is a multicast address", ErrInvalid, p.Iface, p.MAC)
		case bytes.Equal(p.MAC, make([]byte, 6)):
			return fmt.Errorf("%w: port %s: MAC %s is all zeros", ErrInvalid, p.Iface, p.MAC)
		case !p.Addr.Is4() || p.Addr.IsUnspecified() || p.Addr.IsMulticast() || p.Addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			return fmt.Errorf("%w: port %s: address %v is not a unicast IPv4 address", ErrInvalid, p.Iface, p.Addr)
		}
		if ifaces[p.Iface] {
			return fmt.Errorf("%w: port %s is listed twice", ErrConflict, p.Iface)
		}
		ifaces[p.Iface] = true
		if other, ok := macs[string(p.MAC)]; ok {
			return fmt.Errorf("%w: ports %s and %s both claim MAC %s", ErrConflict, other, p.Iface, p.MAC)
		}
		macs[string(p.MAC)] = p.Iface
		if other, ok := addrs[p.Addr]; ok {
			return fmt.Errorf("%w: ports %s and %s both claim address %v", ErrConflict, other, p.Iface, p.Addr)
		}
		addrs[p.Addr] = p.Iface
	}
	return nil
}

// validIfName follows the kernel's dev_valid_name.
func validIfName(name string) error {
	if name == "" || len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\r\x00") {
		return fmt.Errorf("%w: %q is not a valid interface name", ErrInvalid, name)
	}
	return nil
}

// sortPorts orders ports by interface name, for stable results.
func sortPorts(ports []Port) {
	slices.SortFunc(ports, func(a, b Port) int { return cmp.Compare(a.Iface, b.Iface) })
}

// Changes says what Apply changed. The zero value means the table was
// already right.
type Changes struct {
	// Table: the table was made whole, because it was missing or its
	// chain or sets were not as corpus writes them.
	Table bool
	// Rules: the chain's rules differed (a flush by hand, say) and were
	// rewritten whole.
	Rules bool
	// Added, Replaced and Removed name the ports whose entries were
	// added, replaced (another MAC or address) or deleted.
	Added, Replaced, Removed []string
	// Before and After are the ruleset generations just before and after
	// the write (both zero when Apply wrote nothing, or could not read
	// them). After == Before+1 says the write was the only transaction
	// between them; it touched this table alone, so whoever knew the
	// rest of the ruleset at Before knows it at After (nat.NAT.Passed).
	Before, After uint32
}

// Changed reports whether Apply changed anything.
func (c Changes) Changed() bool {
	return c.Table || c.Rules || len(c.Added) > 0 || len(c.Replaced) > 0 || len(c.Removed) > 0
}

// State is what the table holds. The caller owns it.
type State struct {
	// Exists: the table is there.
	Exists bool
	// Ports are read back from the sets, by interface name; a port
	// missing from one of the sets has the zero value there.
	Ports []Port
	// Rules is the number of rules in the chain.
	Rules int
	// Dropped counts the frames the chain's rules dropped since they
	// were last written.
	Dropped uint64
}

// Filter programs the layer-2 filter of guest ports in the calling
// thread's network namespace. Its methods are safe for concurrent use;
// they run one at a time.
type Filter struct {
	table  string
	prefix string
	log    *slog.Logger

	mu sync.Mutex
}

// New returns a Filter for the table cfg names. It fails with ErrInvalid
// for a bad cfg.
func New(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Filter{
		table:  cmp.Or(cfg.Table, DefaultTable),
		prefix: cfg.PortPrefix,
		log:    log.With("component", "l2filter"),
	}, nil
}

// Table is the name of the table the filter owns.
func (f *Filter) Table() string { return f.table }
