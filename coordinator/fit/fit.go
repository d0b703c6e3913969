// Package fit decides whether a node can take a guest: its kind (status,
// mode, labels, and a driver of the guest's that is healthy and offers
// its image, packages and volume) and its room (memory, cpu, disk, node
// ports and guest id ranges beside what the node holds).
//
// The functions are pure and read only the API's messages: the
// scheduler filters and ranks nodes with them on a snapshot, and the
// state machine checks each placement and update with them again as it
// applies it, so both decide alike. Reasons are short phrases that read
// after a count: "2 nodes short of memory".
package fit

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"corpus/coordinator/idrange"
	"corpus/internal/imageref"
	corpusv1 "corpus/proto/corpus/v1"
)

// Label keys placement knows: guests of one project spread across zones,
// and constraints name these like any other label.
const (
	LabelRegion = "region"
	LabelZone   = "zone"
)

// Unfit says why node n cannot take a guest with spec, or "" when it can.
// env is the project environment the guest runs ("" outside projects):
// only nodes in that mode take it. alloc is what the node already holds,
// used the node ports in use there and ranges how many of its guest id
// ranges are taken.
func Unfit(n *corpusv1.Node, alloc *corpusv1.Resources, used map[int32]string, ranges int, spec *corpusv1.GuestSpec, env string) string {
	drv, why := KindUnfit(n, spec, env)
	if why != "" {
		return why
	}
	return RoomUnfit(n, drv, alloc, used, ranges, spec)
}

// KindUnfit is the half of Unfit that depends on the node and the kind
// of guest, not on what the node holds: its status, mode and labels, and
// its driver for the guest (returned when it fits), whose image,
// packages and volumes it must offer.
func KindUnfit(n *corpusv1.Node, spec *corpusv1.GuestSpec, env string) (*corpusv1.DriverInfo, string) {
	switch {
	case n.Status != corpusv1.NodeReady:
		return nil, "not ready (" + n.Status + ")"
	case n.Mode == corpusv1.ModeDrain:
		return nil, "draining"
	case n.Ineligible:
		return nil, "ineligible"
	case env != "" && n.Mode != env:
		return nil, "in mode " + n.Mode + ", not " + env
	}
	if why := missingLabel(n.Labels, spec.GetConstraints()); why != "" {
		return nil, why
	}
	drv := DriverOn(n, spec.GetDriver())
	switch {
	case drv == nil:
		return nil, "without driver " + spec.GetDriver()
	case !drv.Healthy:
		return nil, "with driver " + spec.GetDriver() + " unhealthy"
	case !takesImage(drv, spec.GetImage()):
		return nil, "without image " + spec.GetImage()
	case len(spec.GetPackages()) > 0 && !slices.Contains(drv.PackageImages, spec.GetImage()):
		return nil, "without packages for image " + spec.GetImage()
	case hasCommand(spec) && !runsOCI(drv, spec.GetImage()):
		return nil, "without a command for image " + spec.GetImage()
	case spec.GetVolume() != nil && drv.NoVolumes:
		return nil, "with driver " + spec.GetDriver() + " unable to give guests volumes"
	}
	return drv, ""
}

// KindKey names a kind of guest as KindUnfit sees it: two guests with
// one key fit the same nodes (what KindUnfit reads, and nothing else;
// change both together).
func KindKey(spec *corpusv1.GuestSpec, env string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %q %t %t %t", env, spec.GetDriver(), spec.GetImage(), len(spec.GetPackages()) > 0, spec.GetVolume() != nil, hasCommand(spec))
	keys := make([]string, 0, len(spec.GetConstraints()))
	for k := range spec.GetConstraints() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %q=%q", k, spec.GetConstraints()[k])
	}
	return b.String()
}

// DriverOn returns node n's driver of that name, or nil. The returned
// value is n's: callers must not change it.
func DriverOn(n *corpusv1.Node, name string) *corpusv1.DriverInfo {
	for _, d := range n.GetDrivers() {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// RoomUnfit is the other half of Unfit, for a node whose driver drv
// takes the kind of guest: room for its resources, its node ports and
// its id range beside what the node holds.
func RoomUnfit(n *corpusv1.Node, drv *corpusv1.DriverInfo, alloc *corpusv1.Resources, used map[int32]string, ranges int, spec *corpusv1.GuestSpec) string {
	if why := Short(n.GetCapacity(), alloc, spec.GetResources()); why != "" {
		return why
	}
	if c := idrange.Capacity(drv, spec); c > 0 && ranges >= int(c) {
		return "out of guest id ranges"
	}
	if ports := spec.GetPorts(); len(ports) > 0 && !drv.GetOwnNetwork() {
		if why := PortConflict(n, used, ports); why != "" {
			return "where " + why
		}
	}
	return ""
}

// Short names the first resource of need that capacity capy does not
// leave room for beside alloc ("short of memory", "short of cpu", "short
// of disk"), or "" when there is room for all. A resource need asks none
// of (0) always fits, so a guest that grows asks for what it adds alone
// and is not refused for a resource the node is already short of.
func Short(capy, alloc, need *corpusv1.Resources) string {
	short := func(need, capy, alloc int64) bool { return need > 0 && need > capy-alloc }
	switch {
	case short(need.GetMemoryBytes(), capy.GetMemoryBytes(), alloc.GetMemoryBytes()):
		return "short of memory"
	case short(need.GetCpuMillis(), capy.GetCpuMillis(), alloc.GetCpuMillis()):
		return "short of cpu"
	case short(need.GetDiskBytes(), capy.GetDiskBytes(), alloc.GetDiskBytes()):
		return "short of disk"
	}
	return ""
}

// missingLabel names the first constraint (by label name) the labels do
// not meet, or "".
func missingLabel(labels, constraints map[string]string) string {
	if len(constraints) == 0 {
		return ""
	}
	keys := make([]string, 0, len(constraints))
	for k := range constraints {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if labels[k] != constraints[k] {
			return "without label " + k + "=" + constraints[k]
		}
	}
	return ""
}

// Allocated sums the resources of guests. Applied to the guests a node
// holds it counts those being deleted too: they hold their place until
// their agent confirms they are gone.
func Allocated(guests ...[]*corpusv1.Guest) *corpusv1.Resources {
	sum := &corpusv1.Resources{}
	for _, gs := range guests {
		for _, g := range gs {
			Add(sum, g.GetSpec().GetResources())
		}
	}
	return sum
}

// Add adds r to sum.
func Add(sum, r *corpusv1.Resources) {
	sum.MemoryBytes += r.GetMemoryBytes()
	sum.CpuMillis += r.GetCpuMillis()
	sum.DiskBytes += r.GetDiskBytes()
}

// PortConflict returns why a guest's NAT ports cannot be published on a
// node, or "" when they can. used maps the node ports in use there to
// who uses them.
func PortConflict(node *corpusv1.Node, used map[int32]string, ports []*corpusv1.Port) string {
	for _, p := range ports {
		if min := node.GetMinHostPort(); min > 0 && p.HostPort < min {
			return fmt.Sprintf("port %d is below the node's lowest publishable port %d", p.HostPort, min)
		}
		if owner, ok := used[p.HostPort]; ok {
			return fmt.Sprintf("port %d is used by %s", p.HostPort, owner)
		}
	}
	return ""
}

// takesImage reports whether driver drv runs image: it takes any image
// (it lists none), lists it, or takes OCI references and image is one.
func takesImage(drv *corpusv1.DriverInfo, image string) bool {
	return len(drv.Images) == 0 || slices.Contains(drv.Images, image) || (drv.OciImages && imageref.IsReference(image))
}

// runsOCI says whether drv runs image as an OCI image, whose entrypoint
// and cmd a guest's command and args replace: a reference it pulls, or
// any image for a driver that lists none (Kubernetes).
func runsOCI(drv *corpusv1.DriverInfo, image string) bool {
	return len(drv.Images) == 0 || (drv.OciImages && imageref.IsReference(image))
}

func hasCommand(spec *corpusv1.GuestSpec) bool {
	return len(spec.GetCommand())+len(spec.GetArgs()) > 0
}

// CommandRefusal is why a guest of spec cannot be created: it has a
// command or args, and the nodes that have its driver build its image
// themselves (busybox, debian/bookworm): there is no entrypoint or cmd
// to replace. "" when it has none, when a node's driver runs the image
// as an OCI image, or when no node has the driver yet.
func CommandRefusal(nodes []*corpusv1.Node, spec *corpusv1.GuestSpec) string {
	if !hasCommand(spec) {
		return ""
	}
	found := false
	for _, n := range nodes {
		if d := DriverOn(n, spec.GetDriver()); d != nil {
			if runsOCI(d, spec.GetImage()) {
				return ""
			}
			found = true
		}
	}
	if !found {
		return ""
	}
	return fmt.Sprintf("driver %s builds image %s itself: it has no entrypoint or cmd for a command and args to replace (they are for OCI images, REGISTRY/REPO:TAG)", spec.GetDriver(), spec.GetImage())
}

// OCIRefusal is why a guest of spec cannot be created: its image is an
// OCI reference, and the nodes that have its driver have it without OCI
// images (the libvirt driver boots the VM images it builds). It names
// the drivers of the nodes that take OCI images. "" when the image is no
// reference, when a node's driver of that name takes OCI images, or when
// no node has the driver yet (the guest waits for one, as any guest
// does).
func OCIRefusal(nodes []*corpusv1.Node, spec *corpusv1.GuestSpec) string {
	if !imageref.IsReference(spec.GetImage()) {
		return ""
	}
	var images []string
	can := map[string]bool{}
	for _, n := range nodes {
		for _, d := range n.GetDrivers() {
			switch takes := takesImage(d, spec.GetImage()); {
			case d.Name == spec.GetDriver() && takes:
				return ""
			case d.Name == spec.GetDriver():
				images = d.Images
			case takes:
				can[d.Name] = true
			}
		}
	}
	if images == nil {
		return ""
	}
	why := fmt.Sprintf("driver %s runs the images it builds (%s), not OCI images such as %s", spec.GetDriver(), strings.Join(images, ", "), spec.GetImage())
	if len(can) == 0 {
		return why
	}
	var with []string
	for _, d := range slices.Sorted(maps.Keys(can)) {
		with = append(with, "--driver "+d)
	}
	return fmt.Sprintf("%s: the nodes run them with %s", why, strings.Join(with, " or "))
}
