package nat

import (
	"net/netip"
	"slices"
	"testing"
)

func TestRender(t *testing.T) {
	t.Parallel()
	l := newLayout("CORPUS")
	d := Desired{
		Subnets: []netip.Prefix{subnet},
		Bridge:  "br0",
		Forwards: []Forward{
			{Proto: "udp", HostPort: 53, GuestAddr: g2, GuestPort: 5353},
			{Proto: "tcp", HostPort: 8080, HostAddr: nodeIP, GuestAddr: g1, GuestPort: 80},
		},
		Groups:    [][]netip.Addr{{g2, g1}, {netip.MustParseAddr("10.210.3.9")}},
		NodePorts: []NodePort{{"udp", 53}, {"tcp", 80}, {"tcp", 53}},
		Blocked:   []netip.AddrPort{netip.MustParseAddrPort("10.99.0.9:7400")},
		Peers:     []netip.Prefix{netip.MustParsePrefix("10.210.4.0/24")},
	}
	got := l.render(d)
	want := map[Chain][]string{
		{"nat", "CORPUS-POSTROUTING"}: {
			"-s 10.210.3.0/24 -d 10.210.4.0/24 -j RETURN",
			"-s 10.210.3.0/24 -d 10.210.3.0/24 -m conntrack --ctstate DNAT -j MASQUERADE",
			"-s 10.210.3.0/24 ! -o br0 -j MASQUERADE",
		},
		{"filter", "CORPUS-FORWARD"}: {
			"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
			"-o br0 -m conntrack --ctstate DNAT -j ACCEPT",
			"-s 10.210.4.0/24 -o br0 -j DROP",
			"-d 10.99.0.9/32 -i br0 -p tcp -m tcp --dport 7400 -j DROP",
			"-s 10.210.3.2/32 -d 10.210.3.3/32 -i br0 -o br0 -j ACCEPT",
			"-s 10.210.3.3/32 -d 10.210.3.2/32 -i br0 -o br0 -j ACCEPT",
			"-i br0 -o br0 -j DROP",
			"-i br0 -j ACCEPT",
		},
		{"filter", "CORPUS-INPUT"}: {
			"! -i br0 -j RETURN",
			"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
			"-p icmp -j ACCEPT",
			"-p tcp -m tcp --dport 53 -j ACCEPT",
			"-p tcp -m tcp --dport 80 -j ACCEPT",
			"-p udp -m udp --dport 53 -j ACCEPT",
			"-j DROP",
		},
	}
	if len(got) != len(want) {
		t.Errorf("render gave %d chains, want %d", len(got), len(want))
	}
	for c, w := range want {
		if !slices.Equal(got[c], w) {
			t.Errorf("render()[%v] =\n%q\nwant\n%q", c, got[c], w)
		}
	}
}

func TestForwardElementRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f   Forward
		m   int
		key elemKey
		val elemVal
	}{
		{Forward{Proto: "tcp", HostPort: 8080, GuestAddr: g1, GuestPort: 80}, anyMap,
			elemKey{6, 0, 0, 0, 0x1f, 0x90}, elemVal{10, 210, 3, 2, 0, 80}},
		{Forward{Proto: "udp", HostPort: 53, HostAddr: nodeIP, GuestAddr: g2, GuestPort: 5353}, addrMap,
			elemKey{10, 99, 0, 1, 17, 0, 0, 0, 0, 53}, elemVal{10, 210, 3, 3, 0x14, 0xe9}},
	}
	for _, tt := range tests {
		m, key, val := encodeForward(tt.f)
		if m != tt.m || key != tt.key || val != tt.val {
			t.Errorf("encodeForward(%v) = %d, %x, %x; want %d, %x, %x", tt.f, m, key, val, tt.m, tt.key, tt.val)
		}
		if got, ok := decodeForward(m, key, val); !ok || got != tt.f {
			t.Errorf("decodeForward(%d, %x, %x) = %+v, %v; want %+v, true", m, key, val, got, ok, tt.f)
		}
	}
	for _, e := range []struct {
		m   int
		key elemKey
		val elemVal
	}{
		{anyMap, elemKey{1, 0, 0, 0, 0x1f, 0x90}, elemVal{10, 210, 3, 2, 0, 80}},       // icmp
		{anyMap, elemKey{6, 0, 0, 0, 0x1f, 0x90, 0, 1}, elemVal{10, 210, 3, 2, 0, 80}}, // padding set
		{anyMap, elemKey{6, 0, 0, 0, 0x1f, 0x90}, elemVal{10, 210, 3, 2, 0, 80, 0, 1}}, // padding set
	} {
		if f, ok := decodeForward(e.m, e.key, e.val); ok {
			t.Errorf("decodeForward(%d, %x, %x) = %+v, true; want false", e.m, e.key, e.val, f)
		}
	}
}
