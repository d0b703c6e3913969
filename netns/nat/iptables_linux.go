package nat

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// iptablesCmd runs the iptables tools: go-iptables for single rules and
// chains, iptables-save and iptables-restore for reading and writing whole
// chains. Commands get argv, never a shell.
type iptablesCmd struct {
	ipt         *iptables.IPTables
	savePath    string // iptables-save
	restorePath string // iptables-restore
	legacy      bool   // x_tables backend rather than nf_tables
}

func newIptables() (*iptablesCmd, error) {
	ipt, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Timeout(5))
	if err != nil {
		return nil, fmt.Errorf("finding iptables: %w", err)
	}
	c := &iptablesCmd{ipt: ipt}
	if c.savePath, err = exec.LookPath("iptables-save"); err != nil {
		return nil, fmt.Errorf("finding iptables-save: %w", err)
	}
	if c.restorePath, err = exec.LookPath("iptables-restore"); err != nil {
		return nil, fmt.Errorf("finding iptables-restore: %w", err)
	}
	// Debian's alternatives point all three at one xtables-*-multi binary;
	// rules written through one backend are invisible to the other.
	main, _ := exec.LookPath("iptables")
	backends := map[string]bool{}
	for _, p := range []string{main, c.savePath, c.restorePath} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", p, err)
		}
		if base := filepath.Base(real); strings.HasPrefix(base, "xtables-") {
			backends[base] = true
			c.legacy = strings.Contains(base, "legacy")
		}
	}
	if len(backends) > 1 {
		return nil, fmt.Errorf("%w: iptables, iptables-save and iptables-restore use different backends (%v); point them at one with update-alternatives", ErrInvalid, backends)
	}
	return c, nil
}

// save returns iptables-save's output for one table.
func (c *iptablesCmd) save(ctx context.Context, table string) ([]byte, error) {
	if c.legacy && !legacyTableLoaded(table) {
		return nil, nil // listing would load the module only to print nothing
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.savePath, "-t", table)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("reading table %s with iptables-save: %w: %s", table, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

func legacyTableLoaded(table string) bool {
	names, err := os.ReadFile("/proc/net/ip_tables_names")
	if err != nil {
		return true // let iptables-save say what is wrong
	}
	for _, n := range strings.Fields(string(names)) {
		if n == table {
			return true
		}
	}
	return false
}

// restore feeds batch to iptables-restore --noflush, which commits each
// table of the batch at once or not at all.
func (c *iptablesCmd) restore(ctx context.Context, batch []byte) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.restorePath, "--noflush", "--wait=5")
	cmd.Stdin = bytes.NewReader(batch)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("writing rules with iptables-restore: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

func (c *iptablesCmd) deleteRule(table, chain, rule string) error {
	args, err := splitArgs(rule)
	if err != nil {
		return fmt.Errorf("deleting rule %q from %s/%s: %w", rule, table, chain, err)
	}
	if err := c.ipt.Delete(table, chain, args...); err != nil {
		return fmt.Errorf("deleting rule %q from %s/%s: %w", rule, table, chain, err)
	}
	return nil
}

func (c *iptablesCmd) insertRule(table, chain string, pos int, rule string) error {
	args, err := splitArgs(rule)
	if err != nil {
		return fmt.Errorf("inserting rule %q into %s/%s: %w", rule, table, chain, err)
	}
	if err := c.ipt.Insert(table, chain, pos, args...); err != nil {
		return fmt.Errorf("inserting rule %q into %s/%s: %w", rule, table, chain, err)
	}
	return nil
}

func (c *iptablesCmd) flushChain(table, chain string) error {
	if err := c.ipt.ClearChain(table, chain); err != nil {
		return fmt.Errorf("flushing chain %s/%s: %w", table, chain, err)
	}
	return nil
}

func (c *iptablesCmd) deleteChain(table, chain string) error {
	exists, err := c.ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("checking chain %s/%s: %w", table, chain, err)
	}
	if !exists {
		return nil
	}
	if err := c.ipt.DeleteChain(table, chain); err != nil {
		return fmt.Errorf("deleting chain %s/%s: %w", table, chain, err)
	}
	return nil
}
