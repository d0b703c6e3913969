package nat

import (
	"net/netip"
	"slices"
	"strings"
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
		{"nat", "CORPUS-PREROUTING"}: {"-j CORPUS-DNAT"},
		{"nat", "CORPUS-OUTPUT"}:     {"! -d 127.0.0.0/8 -j CORPUS-DNAT"},
		{"nat", "CORPUS-DNAT"}: {
			"-d 10.99.0.1/32 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.210.3.2:80",
			"-p udp -m udp --dport 53 -j DNAT --to-destination 10.210.3.3:5353",
		},
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

func TestParseForwardRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range []Forward{
		{Proto: "tcp", HostPort: 8080, GuestAddr: g1, GuestPort: 80},
		{Proto: "udp", HostPort: 53, HostAddr: nodeIP, GuestAddr: g2, GuestPort: 5353},
	} {
		var b strings.Builder
		rule := forwardRule(&b, f)
		got, ok := parseForward(rule)
		if !ok || got != f {
			t.Errorf("parseForward(%q) = %+v, %v; want %+v, true", rule, got, ok, f)
		}
	}
	for _, rule := range []string{
		"-p tcp -m tcp --dport 8080 -j ACCEPT",
		"-p tcp -m tcp --dport x -j DNAT --to-destination 10.210.3.2:80",
		"-d 10.99.0.0/24 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.210.3.2:80",
		"-p tcp -m tcp --dport 08080 -j DNAT --to-destination 10.210.3.2:80",
		"",
	} {
		if f, ok := parseForward(rule); ok {
			t.Errorf("parseForward(%q) = %+v, true; want false", rule, f)
		}
	}
}
