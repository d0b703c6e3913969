package netns

import (
	"errors"
	"net/netip"
	"testing"
)

func TestBridgeValidate(t *testing.T) {
	t.Parallel()
	gw := netip.MustParsePrefix("10.210.3.1/24")
	tests := []struct {
		name string
		b    Bridge
		ok   bool
	}{
		{"good", Bridge{Name: "corpusbr0", Gateway: gw, MTU: 1500}, true},
		{"no MTU", Bridge{Name: "corpusbr0", Gateway: gw}, true},
		{"empty name", Bridge{Gateway: gw}, false},
		{"long name", Bridge{Name: "corpusbridge0123", Gateway: gw}, false},
		{"slash in name", Bridge{Name: "br/0", Gateway: gw}, false},
		{"space in name", Bridge{Name: "br 0", Gateway: gw}, false},
		{"dot name", Bridge{Name: ".", Gateway: gw}, false},
		{"no gateway", Bridge{Name: "br0"}, false},
		{"ipv6 gateway", Bridge{Name: "br0", Gateway: netip.MustParsePrefix("fd00::1/64")}, false},
		{"network address", Bridge{Name: "br0", Gateway: netip.MustParsePrefix("10.210.3.0/24")}, false},
		{"broadcast address", Bridge{Name: "br0", Gateway: netip.MustParsePrefix("10.210.3.255/24")}, false},
		{"host prefix", Bridge{Name: "br0", Gateway: netip.MustParsePrefix("10.210.3.1/32")}, false},
		{"tiny MTU", Bridge{Name: "br0", Gateway: gw, MTU: 20}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.b.Validate()
			if tt.ok && err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tt.b, err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate(%+v) = %v, want ErrInvalid", tt.b, err)
			}
		})
	}
}

func TestVethValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    Veth
		ok   bool
	}{
		{"good", Veth{Name: "vg1", Peer: "eth0", Bridge: "br0"}, true},
		{"same names in another namespace", Veth{Name: "eth0", Peer: "eth0", Bridge: "br0", PeerNS: "/run/netns/x"}, true},
		{"same names here", Veth{Name: "eth0", Peer: "eth0", Bridge: "br0"}, false},
		{"no peer", Veth{Name: "vg1", Bridge: "br0"}, false},
		{"no bridge", Veth{Name: "vg1", Peer: "eth0"}, false},
		{"bad MTU", Veth{Name: "vg1", Peer: "eth0", Bridge: "br0", MTU: 70000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.v.Validate()
			if tt.ok && err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tt.v, err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate(%+v) = %v, want ErrInvalid", tt.v, err)
			}
		})
	}
}

func TestBridgeChangesChanged(t *testing.T) {
	t.Parallel()
	if (BridgeChanges{}).Changed() {
		t.Error("zero BridgeChanges.Changed() = true, want false")
	}
	if !(BridgeChanges{HairpinPorts: []string{"vg1"}}).Changed() {
		t.Error("BridgeChanges{HairpinPorts}.Changed() = false, want true")
	}
}
