package nat

import (
	"errors"
	"net/netip"
	"testing"
)

var (
	subnet = netip.MustParsePrefix("10.210.3.0/24")
	g1     = netip.MustParseAddr("10.210.3.2")
	g2     = netip.MustParseAddr("10.210.3.3")
	nodeIP = netip.MustParseAddr("10.99.0.1")
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"CORPUS", true},
		{"CORPUS_T1", true},
		{"C0RPUS", true},
		{"corpus", false},
		{"1CORPUS", false},
		{"COR-PUS", false},
		{"ABCDEFGHIJKLMNOPQ", false}, // 17 bytes: <prefix>-POSTROUTING > 28
		{"ABCDEFGHIJKLMNOP", true},
	}
	for _, tt := range tests {
		err := Config{Prefix: tt.prefix}.Validate()
		if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, ErrInvalid)) {
			t.Errorf("Config{Prefix: %q}.Validate() = %v, want ok=%v", tt.prefix, err, tt.ok)
		}
	}
}

func TestDesiredValidate(t *testing.T) {
	t.Parallel()
	fwd := func(proto string, host netip.Addr, port int, guest netip.Addr) Forward {
		return Forward{Proto: proto, HostAddr: host, HostPort: port, GuestAddr: guest, GuestPort: 80}
	}
	base := func(f ...Forward) Desired {
		return Desired{Subnets: []netip.Prefix{subnet}, Bridge: "br0", Forwards: f}
	}
	tests := []struct {
		name string
		d    Desired
		want error
	}{
		{"empty", Desired{}, nil},
		{"good", base(fwd("tcp", netip.Addr{}, 8080, g1), fwd("udp", netip.Addr{}, 8080, g1)), nil},
		{"two addresses one port", base(fwd("tcp", nodeIP, 8080, g1), fwd("tcp", netip.MustParseAddr("10.99.0.5"), 8080, g2)), nil},
		{"unspecified is any", base(fwd("tcp", netip.IPv4Unspecified(), 8080, g1)), nil},
		{"no bridge", Desired{Subnets: []netip.Prefix{subnet}}, ErrInvalid},
		{"bad bridge", Desired{Bridge: "br 0"}, ErrInvalid},
		{"host bits in subnet", Desired{Bridge: "br0", Subnets: []netip.Prefix{netip.MustParsePrefix("10.210.3.1/24")}}, ErrInvalid},
		{"ipv6 subnet", Desired{Bridge: "br0", Subnets: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}}, ErrInvalid},
		{"subnet twice", Desired{Bridge: "br0", Subnets: []netip.Prefix{subnet, subnet}}, ErrInvalid},
		{"bad proto", base(fwd("sctp", netip.Addr{}, 8080, g1)), ErrInvalid},
		{"port 0", base(fwd("tcp", netip.Addr{}, 0, g1)), ErrInvalid},
		{"port too big", base(fwd("tcp", netip.Addr{}, 65536, g1)), ErrInvalid},
		{"guest outside subnets", base(fwd("tcp", netip.Addr{}, 8080, netip.MustParseAddr("10.211.0.2"))), ErrInvalid},
		{"ipv6 host address", base(fwd("tcp", netip.MustParseAddr("fd00::1"), 8080, g1)), ErrInvalid},
		{"same port twice", base(fwd("tcp", netip.Addr{}, 8080, g1), fwd("tcp", netip.Addr{}, 8080, g2)), ErrConflict},
		{"any and one address", base(fwd("tcp", nodeIP, 8080, g1), fwd("tcp", netip.Addr{}, 8080, g2)), ErrConflict},
		{"same address twice", base(fwd("udp", nodeIP, 53, g1), fwd("udp", nodeIP, 53, g2)), ErrConflict},
		{"one address and any", base(fwd("tcp", netip.Addr{}, 8080, g1), fwd("tcp", nodeIP, 8080, g2)), ErrConflict},
		{"unspecified and any", base(fwd("tcp", netip.IPv4Unspecified(), 8080, g1), fwd("tcp", netip.Addr{}, 8080, g2)), ErrConflict},
		{"same port, other protocol", base(fwd("tcp", netip.Addr{}, 53, g1), fwd("udp", nodeIP, 53, g2)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.d.Validate()
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Validate() = %v, want %v", err, tt.want)
			}
		})
	}
}
