package agent

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// capacity reads the host's total memory, cores and the size of the file
// system holding the state folder. Totals, not free amounts: the scheduler
// subtracts what guests are allocated, and totals do not churn.
//
// Drivers whose guests run elsewhere (drivers.CapacityReporter) report
// their own capacity; the node's is then theirs, summed, and the host's
// is left out. A reporter that fails counts as nothing until it answers.
func (a *Agent) capacity(ctx context.Context) *corpusv1.Resources {
	var (
		sum   corpusv1.Resources
		found bool
	)
	for _, name := range a.cfg.Drivers {
		cr, ok := a.drivers[name].(drivers.CapacityReporter)
		if !ok {
			continue
		}
		found = true
		c, err := cr.Capacity(ctx)
		if err != nil {
			a.logger.Warn("reading driver capacity", "driver", name, "error", err)
			continue
		}
		sum.MemoryBytes += c.MemoryBytes
		sum.CpuMillis += c.CPUMillis
		sum.DiskBytes += c.DiskBytes
	}
	if found {
		return &sum
	}
	return hostCapacity(a.cfg.StateDir)
}

func hostCapacity(stateDir string) *corpusv1.Resources {
	r := &corpusv1.Resources{CpuMillis: int64(runtime.NumCPU()) * 1000, MemoryBytes: memTotal()}
	var st unix.Statfs_t
	if unix.Statfs(stateDir, &st) == nil {
		r.DiskBytes = int64(st.Blocks) * int64(st.Bsize)
	}
	return r
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// driverInfo fingerprints every configured driver. A configured driver
// that failed to start is reported unhealthy with the reason.
func (a *Agent) driverInfo(ctx context.Context) []*corpusv1.DriverInfo {
	var out []*corpusv1.DriverInfo
	for _, name := range a.cfg.Drivers {
		d, ok := a.drivers[name]
		if !ok {
			out = append(out, &corpusv1.DriverInfo{Name: name, Detail: "driver failed to start; see the agent log"})
			continue
		}
		fp := d.Fingerprint(ctx)
		caps := d.Capabilities()
		out = append(out, &corpusv1.DriverInfo{
			Name: name, Healthy: fp.Healthy, Detail: fp.Detail, Attributes: fp.Attributes,
			Exec: caps.Exec, Images: caps.Images, PackageImages: caps.PackageImages, OciImages: caps.OCIImages, NoVolumes: caps.Volumes == drivers.NoVolumes, OwnNetwork: !caps.HostNetwork,
			Converge: caps.Converge, IdRanges: caps.IDRanges,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
