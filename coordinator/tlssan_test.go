package coordinator

import (
	"net"
	"slices"
	"testing"
)

// TestSANNamesOfAWildcard: a replica listening on every address covers
// each of the host's addresses (loopback included, and localhost); one
// on a named host covers that name.
func TestSANNamesOfAWildcard(t *testing.T) {
	t.Parallel()
	host := func() ([]net.Addr, error) {
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)},
			&net.IPNet{IP: net.ParseIP("192.0.2.7"), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("2001:db8::7"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}
	for _, tt := range []struct {
		api, raft, advertise string
		ips, names           []string
	}{
		{"0.0.0.0:7400", "127.0.0.1:7401", "", []string{"127.0.0.1", "192.0.2.7", "2001:db8::7"}, []string{"localhost"}},
		{":7400", "10.0.0.1:7401", "", []string{"127.0.0.1", "192.0.2.7", "2001:db8::7", "10.0.0.1"}, []string{"localhost"}},
		{"10.0.0.1:7400", "10.0.0.1:7401", "cp.example.test:7400", []string{"10.0.0.1"}, []string{"cp.example.test"}},
		{"127.0.0.1:7400", "127.0.0.1:7401", "203.0.113.9:7400", []string{"127.0.0.1", "203.0.113.9"}, []string{"localhost"}},
	} {
		ips, names := sanNames(Config{APIAddr: tt.api, RaftAddr: tt.raft, AdvertiseAPI: tt.advertise}, host)
		var got []string
		for _, ip := range ips {
			got = append(got, ip.String())
		}
		if !slices.Equal(got, tt.ips) || !slices.Equal(names, tt.names) {
			t.Errorf("sanNames(api %s, raft %s, advertise %q) = %v %v, want %v %v", tt.api, tt.raft, tt.advertise, got, names, tt.ips, tt.names)
		}
	}
}
