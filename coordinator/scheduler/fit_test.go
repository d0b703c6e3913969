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

func drivers(d ...*corpusv1.DriverInfo) func(*corpusv1.Node) {
	return func(n *corpusv1.Node) { n.Drivers = d }
}

// free is a candidate with nothing allocated.
func free(n *corpusv1.Node) scheduler.Candidate {
	return scheduler.Candidate{Node: n, Allocated: &corpusv1.Resources{}}
}

// used is a candidate with memGiB, cpu and disk already allocated.
func used(n *corpusv1.Node, memGiB, cpu, diskGiB int64) scheduler.Candidate {
	return scheduler.Candidate{Node: n, Allocated: &corpusv1.Resources{MemoryBytes: memGiB * gib, CpuMillis: cpu, DiskBytes: diskGiB * gib}}
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
			name:  "spread: the most free memory share wins",
			cands: []scheduler.Candidate{used(node("a", 8), 6, 0, 0), free(node("b", 4)), used(node("c", 4), 2, 0, 0)},
			node:  "b",
		},
		{
			name:  "spread is a share, not an amount",
			cands: []scheduler.Candidate{used(node("a", 64), 48, 0, 0), used(node("b", 4), 1, 0, 0)},
			node:  "b",
		},
		{name: "tie broken by name", cands: []scheduler.Candidate{free(node("b", 8)), free(node("a", 8))}, node: "a"},
		{name: "tie broken by name in any order", cands: []scheduler.Candidate{free(node("a", 8)), free(node("b", 8))}, node: "a"},
		{
			name:  "tie among many",
			cands: []scheduler.Candidate{free(node("d", 4)), used(node("c", 8), 4, 0, 0), free(node("b", 4)), free(node("e", 4))},
			node:  "b",
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
			got := scheduler.Place(g, tt.cands)
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
	scheduler.Place(g, cands)
	if !proto.Equal(g, wantG) {
		t.Errorf("Place changed the guest to %v, want %v", g, wantG)
	}
	for i := range cands {
		if !proto.Equal(cands[i].Node, want[i].Node) || !proto.Equal(cands[i].Allocated, want[i].Allocated) {
			t.Errorf("Place changed candidate %d to %+v, want %+v", i, cands[i], want[i])
		}
	}
}

func TestAllocated(t *testing.T) {
	t.Parallel()
	res := func(mem, cpu, disk int64) *corpusv1.Guest {
		return &corpusv1.Guest{Spec: &corpusv1.GuestSpec{Resources: &corpusv1.Resources{MemoryBytes: mem, CpuMillis: cpu, DiskBytes: disk}}}
	}
	tests := []struct {
		name   string
		guests []*corpusv1.Guest
		want   *corpusv1.Resources
	}{
		{"none", nil, &corpusv1.Resources{}},
		{"one", []*corpusv1.Guest{res(1, 2, 3)}, &corpusv1.Resources{MemoryBytes: 1, CpuMillis: 2, DiskBytes: 3}},
		{"several", []*corpusv1.Guest{res(1, 2, 3), res(10, 20, 30)}, &corpusv1.Resources{MemoryBytes: 11, CpuMillis: 22, DiskBytes: 33}},
		{"without a spec", []*corpusv1.Guest{res(1, 2, 3), {}}, &corpusv1.Resources{MemoryBytes: 1, CpuMillis: 2, DiskBytes: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := scheduler.Allocated(tt.guests); !proto.Equal(got, tt.want) {
				t.Errorf("Allocated(%s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}
