//go:build !linux

package nat

import "context"

// iptablesCmd stands in for the Linux iptables tools; New refuses to build
// a NAT here, so its methods are never reached.
type iptablesCmd struct{ legacy bool }

func newIptables() (*iptablesCmd, error) { return nil, ErrNotSupported }

func (c *iptablesCmd) save(ctx context.Context, table string) ([]byte, error) {
	return nil, ErrNotSupported
}
func (c *iptablesCmd) restore(ctx context.Context, batch []byte) error       { return ErrNotSupported }
func (c *iptablesCmd) deleteRule(table, chain, rule string) error            { return ErrNotSupported }
func (c *iptablesCmd) insertRule(table, chain string, p int, r string) error { return ErrNotSupported }
func (c *iptablesCmd) flushChain(table, chain string) error                  { return ErrNotSupported }
func (c *iptablesCmd) deleteChain(table, chain string) error                 { return ErrNotSupported }
