package ipam_test

import (
	"errors"
	"testing"

	"corpus/coordinator/ipam"
)

// TestNextSubnetAndAddress: the lowest free subnet and address, the
// gateway and broadcast skipped, exhaustion and bad ranges said apart.
func TestNextSubnetAndAddress(t *testing.T) {
	for _, tt := range []struct {
		network string
		bits    int
		taken   []string
		want    string
		err     error
	}{
		{"10.210.0.0/16", 24, nil, "10.210.0.0/24", nil},
		{"10.210.0.0/16", 24, []string{"10.210.0.0/24", "10.210.2.0/24"}, "10.210.1.0/24", nil},
		{"10.0.0.0/30", 31, nil, "", ipam.ErrBadRange},
		{"10.0.0.0/29", 30, []string{"10.0.0.0/30", "10.0.0.4/30"}, "", ipam.ErrExhausted},
		{"fd00::/64", 96, nil, "", ipam.ErrBadRange},
		{"nonsense", 24, nil, "", ipam.ErrBadRange},
	} {
		got, err := ipam.NextSubnet(tt.network, tt.bits, tt.taken)
		if !errors.Is(err, tt.err) || (err == nil && got.String() != tt.want) {
			t.Errorf("NextSubnet(%s, /%d, %v) = %v, %v; want %s, %v", tt.network, tt.bits, tt.taken, got, err, tt.want, tt.err)
		}
	}
	for _, tt := range []struct {
		subnet string
		taken  []string
		want   string
		err    error
	}{
		{"10.210.0.0/24", nil, "10.210.0.2", nil},
		{"10.210.0.0/24", []string{"10.210.0.2", "10.210.0.4"}, "10.210.0.3", nil},
		{"10.210.0.0/30", nil, "10.210.0.2", nil},
		{"10.210.0.0/30", []string{"10.210.0.2"}, "", ipam.ErrExhausted},
		{"10.210.0.0/29", []string{"10.210.0.2", "10.210.0.3", "10.210.0.4", "10.210.0.5", "10.210.0.6"}, "", ipam.ErrExhausted},
		{"", nil, "", ipam.ErrBadRange},
	} {
		got, err := ipam.NextAddress(tt.subnet, tt.taken)
		if !errors.Is(err, tt.err) || (err == nil && got.String() != tt.want) {
			t.Errorf("NextAddress(%s, %v) = %v, %v; want %s, %v", tt.subnet, tt.taken, got, err, tt.want, tt.err)
		}
	}
}
