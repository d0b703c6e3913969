//go:build linux && cgo

package lxc

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
	"corpus/internal/atomicfile"
)

// cpuPeriod is the CFS period, in microseconds, that CPU limits use.
const cpuPeriod = 100_000

// configWriter sets lxc configuration items, keeping the first failure.
type configWriter struct {
	c   *golxc.Container
	err error
}

func (w *configWriter) clear(key string) {
	if w.err != nil {
		return
	}
	if err := w.c.ClearConfigItem(key); err != nil {
		w.err = fmt.Errorf("clearing %s: %w", key, err)
	}
}

func (w *configWriter) set(key, value string) {
	if w.err != nil {
		return
	}
	if err := w.c.SetConfigItem(key, value); err != nil {
		w.err = fmt.Errorf("setting %s = %s: %w", key, value, err)
	}
}

// configure sets everything the guest's lxc configuration takes from spec
// and from the host, over what the clone inherited from the image cache,
// and saves it. spec must have passed validateSpec. m is the guest's id
// map, nil for a privileged guest.
func (d *Driver) configure(c *golxc.Container, spec drivers.GuestSpec, logFile string, m *idmap) error {
	w := &configWriter{c: c}
	w.clear("lxc.log.file")
	w.set("lxc.log.file", logFile)
	// The console's output, for the guest's log: capped, rotated once.
	w.set("lxc.console.logfile", d.ConsoleLog(spec.Name))
	w.set("lxc.console.size", "1MB")
	w.set("lxc.console.rotate", "1")
	configureNetwork(w, spec.Network)
	if err := d.configureResolver(w, spec); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		w.set("lxc.mount.entry", m.Source+" "+strings.TrimPrefix(m.Target, "/")+" none bind,create=dir 0 0")
	}
	d.configureSecurity(w, m)
	d.configureLimits(w, spec.MemoryBytes, spec.CPUMillis)
	w.clear("lxc.environment")
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		w.set("lxc.environment", k+"="+spec.Env[k])
	}
	if w.err != nil {
		return w.err
	}
	if err := c.SaveConfigFile(c.ConfigFileName()); err != nil {
		return fmt.Errorf("saving config: %w", err)
	}
	return nil
}

// configureNetwork gives the guest its network devices: one veth on the
// agent's bridge with a static address and the bridge as gateway, or only
// loopback (lxc.net.0.type = empty) without a network. The host's
// default.conf would otherwise attach it to lxcbr0. LXC sets the address
// before the guest's init runs, so any image gets it.
func configureNetwork(w *configWriter, n *drivers.Network) {
	w.clear("lxc.net")
	if n == nil {
		w.set("lxc.net.0.type", "empty")
		return
	}
	w.set("lxc.net.0.type", "veth")
	w.set("lxc.net.0.link", n.Bridge)
	w.set("lxc.net.0.flags", "up")
	w.set("lxc.net.0.name", "eth0")
	if n.MAC != "" {
		w.set("lxc.net.0.hwaddr", n.MAC)
	}
	if n.HostInterface != "" {
		w.set("lxc.net.0.veth.pair", n.HostInterface)
	}
	w.set("lxc.net.0.ipv4.address", n.Address.String())
	if n.Gateway.IsValid() {
		w.set("lxc.net.0.ipv4.gateway", n.Gateway.String())
	}
}

// configureResolver gives the guest the resolver configuration of its
// network: a resolv.conf kept beside the container's config and
// bind-mounted read-only over /etc/resolv.conf, which works the same for
// every kind of root file system (directory or overlay clone).
func (d *Driver) configureResolver(w *configWriter, spec drivers.GuestSpec) error {
	n := spec.Network
	if n == nil || len(n.Nameservers) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("# written by corpus: the node's resolver answers the cluster zone\n")
	for _, ns := range n.Nameservers {
		b.WriteString("nameserver " + ns.String() + "\n")
	}
	if len(n.Search) > 0 {
		b.WriteString("search " + strings.Join(n.Search, " ") + "\n")
	}
	path := filepath.Join(d.guestDir(spec.Name), "resolv.conf")
	if err := atomicfile.Write(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing resolv.conf: %w", err)
	}
	w.set("lxc.mount.entry", path+" etc/resolv.conf none bind,ro,create=file 0 0")
	return nil
}

// configureLimits writes the memory and CPU limits with the keys of the
// host's cgroup version (zero means unlimited), and the device
// allow-list and process cap that go with them.
func (d *Driver) configureLimits(w *configWriter, memoryBytes, cpuMillis int64) {
	w.clear("lxc.cgroup")
	w.clear("lxc.cgroup2")
	d.configureDevices(w)
	quota := cpuMillis * cpuPeriod / 1000
	if d.cgroup == 2 {
		if memoryBytes > 0 {
			w.set("lxc.cgroup2.memory.max", strconv.FormatInt(memoryBytes, 10))
		}
		if cpuMillis > 0 {
			w.set("lxc.cgroup2.cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod))
		}
		return
	}
	if memoryBytes > 0 {
		w.set("lxc.cgroup.memory.limit_in_bytes", strconv.FormatInt(memoryBytes, 10))
	}
	if cpuMillis > 0 {
		w.set("lxc.cgroup.cpu.cfs_period_us", strconv.Itoa(cpuPeriod))
		w.set("lxc.cgroup.cpu.cfs_quota_us", strconv.FormatInt(quota, 10))
	}
}

// configuredLimits reads the limits back from a guest's configuration,
// whichever cgroup version's keys it uses.
func configuredLimits(c *golxc.Container) (memoryBytes, cpuMillis int64) {
	item := func(key string) string {
		v := c.ConfigItem(key)
		if len(v) == 0 {
			return ""
		}
		return strings.TrimSpace(v[0])
	}
	if v, err := strconv.ParseInt(item("lxc.cgroup2.memory.max"), 10, 64); err == nil {
		memoryBytes = v
	} else if v, err := strconv.ParseInt(item("lxc.cgroup.memory.limit_in_bytes"), 10, 64); err == nil {
		memoryBytes = v
	}
	if f := strings.Fields(item("lxc.cgroup2.cpu.max")); len(f) == 2 {
		cpuMillis = millis(f[0], f[1])
	} else {
		cpuMillis = millis(item("lxc.cgroup.cpu.cfs_quota_us"), item("lxc.cgroup.cpu.cfs_period_us"))
	}
	return memoryBytes, cpuMillis
}

// millis converts a CFS quota and period to thousandths of a core; 0 when
// either is missing or unlimited.
func millis(quota, period string) int64 {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0
	}
	return q * 1000 / p
}
