package scheduler_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

const gib = 1 << 30

// node is a ready node named name with memGiB of memory, 4 cores, 100 GiB
// of disk and a healthy lxc driver offering any image, changed by opts.
func node(name string, memGiB int64, opts ...func(*corpusv1.Node)) *corpusv1.Node {
	n := &corpusv1.Node{
		Id: name + "-id", Name: name, Status: state.NodeReady, Mode: "dev",
		Capacity: &corpusv1.Resources{MemoryBytes: memGiB * gib, CpuMillis: 4000, DiskBytes: 100 * gib},
		Drivers:  []*corpusv1.DriverInfo{{Name: "qemu", Healthy: true}, {Name: "lxc", Healthy: true}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func status(s string) func(*corpusv1.Node) { return func(n *corpusv1.Node) { n.Status = s } }

func draining(n *corpusv1.Node) { n.Mode = "drain" }

func ineligible(n *corpusv1.Node) { n.Ineligible = true }

func mode(m string) func(*corpusv1.Node) { return func(n *corpusv1.Node) { n.Mode = m } }

func labels(kv ...string) func(*corpusv1.Node) {
	return func(n *corpusv1.Node) {
		n.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func drivers(d ...*corpusv1.DriverInfo) func(*corpusv1.Node) {
	return func(n *corpusv1.Node) { n.Drivers = d }
}

// idRanges gives the node's lxc driver n guest id ranges.
func idRanges(n uint32) func(*corpusv1.Node) {
	return drivers(&corpusv1.DriverInfo{Name: "lxc", Healthy: true, IdRanges: n})
}

// free is a candidate with nothing allocated.
func free(n *corpusv1.Node) scheduler.Candidate {
	return scheduler.Candidate{Node: n, Allocated: &corpusv1.Resources{}}
}

// used is a candidate with memGiB, cpu and disk already allocated.
func used(n *corpusv1.Node, memGiB float64, cpu, diskGiB int64) scheduler.Candidate {
	return scheduler.Candidate{Node: n, Allocated: &corpusv1.Resources{MemoryBytes: int64(memGiB * gib), CpuMillis: cpu, DiskBytes: diskGiB * gib}}
}

// guest needs 1 GiB, one core and 10 GiB of disk, lxc and busybox.
func guest() *corpusv1.Guest {
	return &corpusv1.Guest{Id: "g-id", Name: "web", Spec: &corpusv1.GuestSpec{
		Driver: "lxc", Image: "busybox",
		Resources: &corpusv1.Resources{MemoryBytes: gib, CpuMillis: 1000, DiskBytes: 10 * gib},
	}}
}

func TestPlace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cands []scheduler.Candidate
		// Exactly one of node and reason is set; prefix compares only
		// the start of the reason.
		node   string
		reason string
		prefix bool
	}{
		{name: "no nodes", reason: "no nodes are enrolled", prefix: true},
		{name: "one node fits", cands: []scheduler.Candidate{free(node("a", 8))}, node: "a"},
		{name: "no allocation known", cands: []scheduler.Candidate{{Node: node("a", 8)}}, node: "a"},
		{name: "exactly enough", cands: []scheduler.Candidate{used(node("a", 2), 1, 3000, 90)}, node: "a"},
		{
			name:   "initializing",
			cands:  []scheduler.Candidate{free(node("a", 8, status(state.NodeInitializing)))},
			reason: "no node fits (1 considered): 1 node not ready (initializing)",
		},
		{
			name:   "down",
			cands:  []scheduler.Candidate{free(node("a", 8, status(state.NodeDown)))},
			reason: "no node fits (1 considered): 1 node not ready (down)",
		},
		{name: "draining", cands: []scheduler.Candidate{free(node("a", 8, draining))}, reason: "no node fits (1 considered): 1 node draining"},
		{
			name:   "driver missing",
			cands:  []scheduler.Candidate{free(node("a", 8, drivers(&corpusv1.DriverInfo{Name: "qemu", Healthy: true})))},
			reason: "no node fits (1 considered): 1 node without driver lxc",
		},
		{
			name:   "driver unhealthy",
			cands:  []scheduler.Candidate{free(node("a", 8, drivers(&corpusv1.DriverInfo{Name: "lxc", Detail: "liblxc missing"})))},
			reason: "no node fits (1 considered): 1 node with driver lxc unhealthy",
		},
		{
			name:   "image not offered",
			cands:  []scheduler.Candidate{free(node("a", 8, drivers(&corpusv1.DriverInfo{Name: "lxc", Healthy: true, Images: []string{"alpine"}})))},
			reason: "no node fits (1 considered): 1 node without image busybox",
		},
		{
			name:  "image offered",
			cands: []scheduler.Candidate{free(node("a", 8, drivers(&corpusv1.DriverInfo{Name: "lxc", Healthy: true, Images: []string{"alpine", "busybox"}})))},
			node:  "a",
		},
		{name: "short of memory", cands: []scheduler.Candidate{used(node("a", 2), 2, 0, 0)}, reason: "no node fits (1 considered): 1 node short of memory"},
		{name: "short of cpu", cands: []scheduler.Candidate{used(node("a", 8), 0, 3500, 0)}, reason: "no node fits (1 considered): 1 node short of cpu"},
		{name: "short of disk", cands: []scheduler.Candidate{used(node("a", 8), 0, 0, 95)}, reason: "no node fits (1 considered): 1 node short of disk"},
		{
			name: "reasons are counted and sorted",
			cands: []scheduler.Candidate{
				used(node("a", 2), 2, 0, 0),
				free(node("b", 8, draining)),
				used(node("c", 1), 1, 0, 0),
				free(node("d", 8, status(state.NodeDown))),
			},
			reason: "no node fits (4 considered): 1 node draining; 1 node not ready (down); 2 nodes short of memory",
		},
		{
			name:  "the one that fits among many that do not",
			cands: []scheduler.Candidate{free(node("a", 64, draining)), used(node("b", 2), 2, 0, 0), free(node("c", 4))},
			node:  "c",
		},
		{
			name:  "bin-pack: the fullest node that fits wins",
			cands: []scheduler.Candidate{used(node("a", 8), 6, 3000, 0), free(node("b", 4)), used(node("c", 4), 2, 2000, 0)},
			node:  "a",
		},
		{
			name:  "bin-pack skips the fuller node that does not fit",
			cands: []scheduler.Candidate{used(node("a", 8), 7.5, 0, 0), used(node("b", 8), 4, 2000, 0), free(node("c", 8))},
			node:  "b",
		},
		{
			name:  "bin-pack weighs shares, not amounts",
			cands: []scheduler.Candidate{used(node("a", 64), 32, 2000, 0), used(node("b", 4), 2, 2000, 0)},
			node:  "b",
		},
		{
			name:  "bin-pack counts cpu as well as memory",
			cands: []scheduler.Candidate{used(node("a", 8), 4, 0, 0), used(node("b", 8), 4, 2000, 0)},
			node:  "b",
		},
		{name: "tie broken by name", cands: []scheduler.Candidate{free(node("b", 8)), free(node("a", 8))}, node: "a"},
		{name: "tie broken by name in any order", cands: []scheduler.Candidate{free(node("a", 8)), free(node("b", 8))}, node: "a"},
		{
			name:  "tie among many",
			cands: []scheduler.Candidate{free(node("d", 4)), used(node("c", 8), 4, 2000, 0), free(node("b", 8)), used(node("e", 8), 4, 2000, 0)},
			node:  "c",
		},
		{name: "ineligible", cands: []scheduler.Candidate{free(node("a", 8, ineligible))}, reason: "no node fits (1 considered): 1 node ineligible"},
		{
			name:  "ineligible skipped",
			cands: []scheduler.Candidate{used(node("a", 8, ineligible), 6, 0, 0), free(node("b", 8))},
			node:  "b",
		},
		{
			name:   "volume where the driver cannot give one",
			cands:  []scheduler.Candidate{free(node("a", 8, drivers(&corpusv1.DriverInfo{Name: "lxc", Healthy: true, NoVolumes: true})))},
			reason: "no node fits (1 considered): 1 node with driver lxc unable to give guests volumes",
		},
		{
			name:  "volume where the driver gives them",
			cands: []scheduler.Candidate{free(node("a", 8, drivers(&corpusv1.DriverInfo{Name: "lxc", Healthy: true, NoVolumes: true}))), free(node("b", 8))},
			node:  "b",
		},
		{
			name:   "packages where the image takes none",
			cands:  []scheduler.Candidate{free(node("a", 8, drivers(&corpusv1.DriverInfo{Name: "lxc", Healthy: true, PackageImages: []string{"debian/bookworm"}})))},
			reason: "no node fits (1 considered): 1 node without packages for image busybox",
		},
		{
			name:  "packages where the image takes them",
			cands: []scheduler.Candidate{free(node("a", 8)), free(node("b", 8, drivers(&corpusv1.DriverInfo{Name: "lxc", Healthy: true, PackageImages: []string{"busybox"}})))},
			node:  "b",
		},
		{
			name:   "out of id ranges",
			cands:  []scheduler.Candidate{{Node: node("a", 8, idRanges(2)), Allocated: &corpusv1.Resources{}, IDRanges: 2}},
			reason: "no node fits (1 considered): 1 node out of guest id ranges",
		},
		{
			name:  "id ranges left",
			cands: []scheduler.Candidate{{Node: node("a", 8, idRanges(2)), Allocated: &corpusv1.Resources{}, IDRanges: 1}},
			node:  "a",
		},
		{
			name:   "constraint not met",
			cands:  []scheduler.Candidate{free(node("a", 8, labels("zone", "b"))), free(node("b", 8))},
			reason: "no node fits (2 considered): 2 nodes without label zone=a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := guest()
			want := scheduler.Decision{Reason: tt.reason}
			if tt.node != "" {
				want = scheduler.Decision{NodeID: tt.node + "-id"}
			}
			if strings.HasPrefix(tt.name, "constraint") {
				g.Spec.Constraints = map[string]string{"zone": "a"}
			}
			if strings.HasPrefix(tt.name, "packages") {
				g.Spec.Packages = []string{"python3"}
			}
			if strings.HasPrefix(tt.name, "volume") {
				g.Spec.Volume = &corpusv1.VolumeSpec{Path: "/data"}
			}
			got := scheduler.Place(scheduler.Ask{Guest: g}, tt.cands)
			if tt.prefix {
				if got.NodeID != "" || !strings.HasPrefix(got.Reason, tt.reason) {
					t.Errorf("Place(%s, %s) = %+v, want a reason starting %q", g.Name, tt.name, got, tt.reason)
				}
				return
			}
			if got != want {
				t.Errorf("Place(%s, %s) = %+v, want %+v", g.Name, tt.name, got, want)
			}
		})
	}
}

func TestPlaceDoesNotModifyItsInput(t *testing.T) {
	t.Parallel()
	g := guest()
	cands := []scheduler.Candidate{used(node("a", 8), 1, 1000, 1), free(node("b", 8, draining))}
	wantG := proto.Clone(g)
	var want []scheduler.Candidate
	for _, c := range cands {
		want = append(want, scheduler.Candidate{Node: proto.Clone(c.Node).(*corpusv1.Node), Allocated: proto.Clone(c.Allocated).(*corpusv1.Resources)})
	}
	scheduler.Place(scheduler.Ask{Guest: g, ZoneLoad: map[string]int{"a": 1}}, cands)
	if !proto.Equal(g, wantG) {
		t.Errorf("Place changed the guest to %v, want %v", g, wantG)
	}
	for i := range cands {
		if !proto.Equal(cands[i].Node, want[i].Node) || !proto.Equal(cands[i].Allocated, want[i].Allocated) {
			t.Errorf("Place changed candidate %d to %+v, want %+v", i, cands[i], want[i])
		}
	}
}

// TestPlaceEnvironments: a project environment's guest goes only to nodes
// in that mode; other guests go to nodes of any mode but drain.
func TestPlaceEnvironments(t *testing.T) {
	t.Parallel()
	cands := []scheduler.Candidate{free(node("a", 8, mode("dev"))), free(node("b", 8, mode("prod"))), free(node("c", 8, mode("staging")))}
	tests := []struct {
		env  string
		want scheduler.Decision
	}{
		{"", scheduler.Decision{NodeID: "a-id"}},
		{"prod", scheduler.Decision{NodeID: "b-id"}},
		{"staging", scheduler.Decision{NodeID: "c-id"}},
	}
	for _, tt := range tests {
		if got := scheduler.Place(scheduler.Ask{Guest: guest(), Env: tt.env}, cands); got != tt.want {
			t.Errorf("Place(env %q) = %+v, want %+v", tt.env, got, tt.want)
		}
	}
	only := []scheduler.Candidate{free(node("a", 8, mode("dev"))), free(node("d", 8, draining))}
	want := "no node fits (2 considered): 1 node draining; 1 node in mode dev, not prod"
	if got := scheduler.Place(scheduler.Ask{Guest: guest(), Env: "prod"}, only); got.Reason != want {
		t.Errorf("Place(prod on a dev node) = %+v, want reason %q", got, want)
	}
}

// TestPlaceSpreadsProjectsAcrossZones: a project's guest goes to the zone
// holding the fewest of the project's guests, even when bin-packing would
// choose another; within a zone it bin-packs; constraints narrow first.
func TestPlaceSpreadsProjectsAcrossZones(t *testing.T) {
	t.Parallel()
	a1 := used(node("a1", 8, labels("zone", "a", "region", "eu")), 6, 0, 0)
	a2 := free(node("a2", 8, labels("zone", "a", "region", "eu")))
	b1 := used(node("b1", 8, labels("zone", "b", "region", "eu")), 2, 0, 0)
	b2 := used(node("b2", 8, labels("zone", "b", "region", "eu")), 4, 0, 0)
	c1 := free(node("c1", 8, labels("zone", "c", "region", "us")))
	cands := []scheduler.Candidate{a1, a2, b1, b2, c1}
	tests := []struct {
		name        string
		load        map[string]int
		constraints map[string]string
		want        string
	}{
		{"no project guests yet: bin-pack", nil, nil, "a1"},
		{"zone a holds one: another zone", map[string]int{"a": 1}, nil, "b2"},
		{"a and b hold one: zone c", map[string]int{"a": 1, "b": 1}, nil, "c1"},
		{"every zone holds one: bin-pack again", map[string]int{"a": 1, "b": 1, "c": 1}, nil, "a1"},
		{"fewest, not none", map[string]int{"a": 3, "b": 2, "c": 4}, nil, "b2"},
		{"region constraint first", map[string]int{"a": 1, "b": 1}, map[string]string{"region": "eu"}, "a1"},
		{"zone constraint beats spread", map[string]int{"a": 5}, map[string]string{"zone": "a"}, "a1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := guest()
			g.Spec.Constraints = tt.constraints
			got := scheduler.Place(scheduler.Ask{Guest: g, ZoneLoad: tt.load}, cands)
			if got.NodeID != tt.want+"-id" {
				t.Errorf("Place(zone load %v, constraints %v) = %+v, want node %s", tt.load, tt.constraints, got, tt.want)
			}
		})
	}
}
