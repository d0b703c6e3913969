package state

import (
	"errors"
	"fmt"
	"net/netip"

	"corpus/coordinator/ipam"
	corpusv1 "corpus/proto/corpus/v1"
)

// Network defaults, set in the cluster config at bootstrap.
const (
	DefaultGuestNetwork   = "10.210.0.0/16"
	DefaultNodeSubnetBits = 24
)

// ErrExhausted means an address range has no free entry left.
var ErrExhausted = ipam.ErrExhausted

// ErrPortTaken means a node port is already published or reserved.
var ErrPortTaken = errors.New("port is already in use")

// nextNodeSubnet returns the lowest subnet of the cluster's guest network
// that no node holds (package ipam). A cluster config without a guest
// network uses the defaults.
func nextNodeSubnet(cfg *corpusv1.ClusterConfig, nodes []*corpusv1.Node) (netip.Prefix, error) {
	network, bits := DefaultGuestNetwork, DefaultNodeSubnetBits
	if cfg.GetGuestNetwork() != "" {
		network, bits = cfg.GetGuestNetwork(), int(cfg.GetNodeSubnetBits())
	}
	taken := make([]string, len(nodes))
	for i, n := range nodes {
		taken[i] = n.GuestSubnet
	}
	return ipamErr(ipam.NextSubnet(network, bits, taken))
}

// ipamErr makes ipam's refusals the state's.
func ipamErr[T any](v T, err error) (T, error) {
	if errors.Is(err, ipam.ErrBadRange) {
		err = fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	return v, err
}
