package netns

import "net/netip"

// Route sends a destination prefix (another node's guest subnet) via a
// gateway (that node's address).
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}
