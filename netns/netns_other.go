//go:build !linux

package netns

import (
	"context"
	"net/netip"
)

// EnsureBridge returns ErrNotSupported on this OS.
func (h *Host) EnsureBridge(ctx context.Context, b Bridge) (BridgeChanges, error) {
	return BridgeChanges{}, ErrNotSupported
}

// DeleteBridge returns ErrNotSupported on this OS.
func (h *Host) DeleteBridge(ctx context.Context, name string) error { return ErrNotSupported }

// BridgeStatus returns ErrNotSupported on this OS.
func (h *Host) BridgeStatus(ctx context.Context, name string) (BridgeState, error) {
	return BridgeState{Name: name}, ErrNotSupported
}

// EnsureVeth returns ErrNotSupported on this OS.
func (h *Host) EnsureVeth(ctx context.Context, v Veth) (bool, error) { return false, ErrNotSupported }

// DeleteLink returns ErrNotSupported on this OS.
func (h *Host) DeleteLink(ctx context.Context, name string) error { return ErrNotSupported }

// EnsurePort returns ErrNotSupported on this OS.
func (h *Host) EnsurePort(ctx context.Context, bridge, name string) (bool, error) {
	return false, ErrNotSupported
}

func (h *Host) EnsureRoutes(ctx context.Context, want []Route) (bool, error) {
	return false, ErrNotSupported
}

// CorrectNeighbors returns ErrNotSupported on this OS.
func (h *Host) CorrectNeighbors(ctx context.Context, bridge string, want []Neighbor) ([]netip.Addr, error) {
	return nil, ErrNotSupported
}
