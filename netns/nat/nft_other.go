//go:build !linux

package nat

import "context"

// nftTable stands in for the Linux nftables table; New refuses to build
// a NAT here, so its methods are never reached.
type nftTable struct{}

func newNftTable(name string) *nftTable { return &nftTable{} }

func (t *nftTable) generation(ctx context.Context) (uint32, error) { return 0, ErrNotSupported }
func (t *nftTable) current(ctx context.Context, gen uint32) (observedTable, error) {
	return observedTable{}, ErrNotSupported
}
func (t *nftTable) read(ctx context.Context) (observedTable, error) {
	return observedTable{}, ErrNotSupported
}
func (t *nftTable) write(ctx context.Context, p *Plan) (uint32, uint32, error) {
	return 0, 0, ErrNotSupported
}
func (t *nftTable) passed(before, after uint32)              {}
func (t *nftTable) remove(ctx context.Context) (bool, error) { return false, ErrNotSupported }
func (t *nftTable) name() string                             { return "" }
