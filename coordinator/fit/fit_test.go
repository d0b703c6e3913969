package fit

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corpusv1 "corpus/proto/corpus/v1"
)

const gib = 1 << 30

func node(mutate ...func(*corpusv1.Node)) *corpusv1.Node {
	n := &corpusv1.Node{
		Id: "n1", Name: "n1", Status: corpusv1.NodeReady, Mode: corpusv1.ModeDev,
		Labels:      map[string]string{LabelZone: "a"},
		Capacity:    &corpusv1.Resources{MemoryBytes: 4 * gib, CpuMillis: 4000, DiskBytes: 100 * gib},
		MinHostPort: 1024,
		Drivers: []*corpusv1.DriverInfo{
			{Name: "lxc", Healthy: true, Images: []string{"busybox", "debian"}, PackageImages: []string{"debian"}, IdRanges: 2},
			{Name: "kubernetes", Healthy: true, OwnNetwork: true, NoVolumes: true},
		},
	}
	for _, f := range mutate {
		f(n)
	}
	return n
}

func spec(mutate ...func(*corpusv1.GuestSpec)) *corpusv1.GuestSpec {
	s := &corpusv1.GuestSpec{Driver: "lxc", Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: gib, CpuMillis: 1000, DiskBytes: gib}}
	for _, f := range mutate {
		f(s)
	}
	return s
}

func TestUnfit(t *testing.T) {
	t.Parallel()
	none := &corpusv1.Resources{}
	for _, tc := range []struct {
		name   string
		node   *corpusv1.Node
		alloc  *corpusv1.Resources
		used   map[int32]string
		ranges int
		spec   *corpusv1.GuestSpec
		env    string
		want   string
	}{
		{name: "fits", node: node(), alloc: none, spec: spec()},
		{name: "down", node: node(func(n *corpusv1.Node) { n.Status = corpusv1.NodeDown }), alloc: none, spec: spec(), want: "not ready (down)"},
		{name: "draining", node: node(func(n *corpusv1.Node) { n.Mode = corpusv1.ModeDrain }), alloc: none, spec: spec(), want: "draining"},
		{name: "ineligible", node: node(func(n *corpusv1.Node) { n.Ineligible = true }), alloc: none, spec: spec(), want: "ineligible"},
		{name: "other environment", node: node(), alloc: none, spec: spec(), env: corpusv1.ModeProd, want: "in mode dev, not prod"},
		{name: "label", node: node(), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Constraints = map[string]string{LabelZone: "b"} }), want: "without label zone=b"},
		{name: "no driver", node: node(), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Driver = "libvirt" }), want: "without driver libvirt"},
		{name: "unhealthy driver", node: node(func(n *corpusv1.Node) { n.Drivers[0].Healthy = false }), alloc: none, spec: spec(), want: "with driver lxc unhealthy"},
		{name: "image", node: node(), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Image = "alpine" }), want: "without image alpine"},
		{name: "reference on a driver without OCI images", node: node(), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Image = "registry.example/app:1" }), want: "without image registry.example/app:1"},
		{name: "reference on a driver with OCI images", node: node(func(n *corpusv1.Node) { n.Drivers[0].OciImages = true }), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Image = "registry.example/app:1" })},
		{name: "built name on a driver with OCI images", node: node(func(n *corpusv1.Node) { n.Drivers[0].OciImages = true }), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Image = "alpine" }), want: "without image alpine"},
		{name: "packages", node: node(), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Packages = []string{"curl"} }), want: "without packages for image busybox"},
		{name: "packages offered", node: node(), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) { s.Image, s.Packages = "debian", []string{"curl"} })},
		{name: "no volumes", node: node(), alloc: none, spec: spec(func(s *corpusv1.GuestSpec) {
			s.Driver, s.Volume = "kubernetes", &corpusv1.VolumeSpec{SizeBytes: gib}
		}), want: "with driver kubernetes unable to give guests volumes"},
		{name: "memory", node: node(), alloc: &corpusv1.Resources{MemoryBytes: 3*gib + 1}, spec: spec(), want: "short of memory"},
		{name: "cpu", node: node(), alloc: &corpusv1.Resources{CpuMillis: 3001}, spec: spec(), want: "short of cpu"},
		{name: "disk", node: node(), alloc: &corpusv1.Resources{DiskBytes: 99*gib + 1}, spec: spec(), want: "short of disk"},
		{name: "exactly full", node: node(), alloc: &corpusv1.Resources{MemoryBytes: 3 * gib, CpuMillis: 3000, DiskBytes: 99 * gib}, spec: spec()},
		{name: "id ranges", node: node(), alloc: none, ranges: 2, spec: spec(), want: "out of guest id ranges"},
		{name: "privileged takes no range", node: node(), alloc: none, ranges: 2, spec: spec(func(s *corpusv1.GuestSpec) { s.Privileged = true })},
		{name: "port used", node: node(), alloc: none, used: map[int32]string{8080: "guest db (nat)"},
			spec: spec(func(s *corpusv1.GuestSpec) { s.Ports = []*corpusv1.Port{{HostPort: 8080, GuestPort: 80}} }), want: "where port 8080 is used by guest db (nat)"},
		{name: "port below the lowest", node: node(), alloc: none,
			spec: spec(func(s *corpusv1.GuestSpec) { s.Ports = []*corpusv1.Port{{HostPort: 80, GuestPort: 80}} }), want: "where port 80 is below the node's lowest publishable port 1024"},
		{name: "ports of a driver's own network", node: node(), alloc: none, used: map[int32]string{8080: "guest db (nat)"},
			spec: spec(func(s *corpusv1.GuestSpec) {
				s.Driver, s.Ports = "kubernetes", []*corpusv1.Port{{HostPort: 8080, GuestPort: 80}}
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Unfit(tc.node, tc.alloc, tc.used, tc.ranges, tc.spec, tc.env); got != tc.want {
				t.Errorf("Unfit = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestShort: a resource asked none of fits even where the node holds
// more than it has (its capacity shrank); what is asked must fit.
func TestShort(t *testing.T) {
	t.Parallel()
	capy := &corpusv1.Resources{MemoryBytes: 4 * gib, CpuMillis: 2000, DiskBytes: 10 * gib}
	over := &corpusv1.Resources{MemoryBytes: 2 * gib, CpuMillis: 2500, DiskBytes: gib}
	for _, tc := range []struct {
		need *corpusv1.Resources
		want string
	}{
		{&corpusv1.Resources{MemoryBytes: gib}, ""},
		{&corpusv1.Resources{MemoryBytes: 2 * gib}, ""},
		{&corpusv1.Resources{MemoryBytes: 2*gib + 1}, "short of memory"},
		{&corpusv1.Resources{CpuMillis: 1}, "short of cpu"},
		{&corpusv1.Resources{DiskBytes: 9*gib + 1}, "short of disk"},
		{nil, ""},
	} {
		if got := Short(capy, over, tc.need); got != tc.want {
			t.Errorf("Short(%v) = %q, want %q", tc.need, got, tc.want)
		}
	}
}

// TestKindKey: specs with one key fit the same nodes, and each thing
// KindUnfit reads changes the key.
func TestKindKey(t *testing.T) {
	t.Parallel()
	base := KindKey(spec(), "dev")
	if got := KindKey(spec(func(s *corpusv1.GuestSpec) {
		s.Resources.MemoryBytes = 3 * gib
		s.Ports = []*corpusv1.Port{{HostPort: 9000}}
	}), "dev"); got != base {
		t.Errorf("KindKey changed with resources and ports (read by RoomUnfit only): %q, want %q", got, base)
	}
	for name, other := range map[string]string{
		"env":         KindKey(spec(), "prod"),
		"driver":      KindKey(spec(func(s *corpusv1.GuestSpec) { s.Driver = "kubernetes" }), "dev"),
		"image":       KindKey(spec(func(s *corpusv1.GuestSpec) { s.Image = "debian" }), "dev"),
		"packages":    KindKey(spec(func(s *corpusv1.GuestSpec) { s.Packages = []string{"curl"} }), "dev"),
		"volume":      KindKey(spec(func(s *corpusv1.GuestSpec) { s.Volume = &corpusv1.VolumeSpec{SizeBytes: gib} }), "dev"),
		"constraints": KindKey(spec(func(s *corpusv1.GuestSpec) { s.Constraints = map[string]string{"zone": "a"} }), "dev"),
		"command":     KindKey(spec(func(s *corpusv1.GuestSpec) { s.Args = []string{"serve"} }), "dev"),
	} {
		if other == base {
			t.Errorf("KindKey is the same with another %s: %q", name, base)
		}
	}
}

func TestDriverOn(t *testing.T) {
	t.Parallel()
	n := node()
	if d := DriverOn(n, "kubernetes"); d != n.Drivers[1] {
		t.Errorf("DriverOn(kubernetes) = %v, want the node's second driver", d)
	}
	if d := DriverOn(n, "libvirt"); d != nil {
		t.Errorf("DriverOn(libvirt) = %v, want nil", d)
	}
	if d := DriverOn(nil, "lxc"); d != nil {
		t.Errorf("DriverOn(nil node) = %v, want nil", d)
	}
}

func TestAllocated(t *testing.T) {
	t.Parallel()
	g := func(mem, cpu, disk int64) *corpusv1.Guest {
		return &corpusv1.Guest{Spec: &corpusv1.GuestSpec{Resources: &corpusv1.Resources{MemoryBytes: mem, CpuMillis: cpu, DiskBytes: disk}}}
	}
	got := Allocated([]*corpusv1.Guest{g(1, 2, 3), g(10, 20, 30), {}}, []*corpusv1.Guest{g(100, 200, 300)})
	if got.MemoryBytes != 111 || got.CpuMillis != 222 || got.DiskBytes != 333 {
		t.Errorf("Allocated = %v, want 111 222 333", got)
	}
}

// TestLeaf: the package stays a leaf both the scheduler and the state
// machine can call: of corpus it imports the API's messages and
// coordinator/idrange only (and internal/imageref, a leaf).
func TestLeaf(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"corpus/proto/corpus/v1": true, "corpus/coordinator/idrange": true, "corpus/internal/imageref": true}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "corpus/") && !allowed[path] {
				t.Errorf("%s imports %s; the feasibility leaf imports only %v", f, path, allowed)
			}
		}
	}
}

// TestOCIRefusal: an OCI image for a driver that runs only the images it
// builds is refused naming the drivers that run OCI images; one whose
// driver takes them, or any image, or that no node has yet, is not.
func TestOCIRefusal(t *testing.T) {
	vmNode := node(func(n *corpusv1.Node) {
		n.Drivers = []*corpusv1.DriverInfo{
			{Name: "lxc", Healthy: true, Images: []string{"busybox"}, OciImages: true},
			{Name: "libvirt", Healthy: true, Images: []string{"debian/bookworm"}},
			{Name: "kubernetes", Healthy: true},
		}
	})
	ref := "registry.example:5000/team/app:1"
	for _, tc := range []struct {
		name  string
		nodes []*corpusv1.Node
		spec  *corpusv1.GuestSpec
		want  string // in the refusal; "" for none
	}{
		{"libvirt, an OCI image", []*corpusv1.Node{vmNode}, spec(func(s *corpusv1.GuestSpec) { s.Driver, s.Image = "libvirt", ref }),
			"driver libvirt runs the images it builds (debian/bookworm), not OCI images such as " + ref + ": the nodes run them with --driver kubernetes or --driver lxc"},
		{"libvirt, its own image", []*corpusv1.Node{vmNode}, spec(func(s *corpusv1.GuestSpec) { s.Driver, s.Image = "libvirt", "debian/bookworm" }), ""},
		{"lxc, an OCI image", []*corpusv1.Node{vmNode}, spec(func(s *corpusv1.GuestSpec) { s.Image = ref }), ""},
		{"kubernetes, any image", []*corpusv1.Node{vmNode}, spec(func(s *corpusv1.GuestSpec) { s.Driver, s.Image = "kubernetes", ref }), ""},
		{"no node with the driver", []*corpusv1.Node{node()}, spec(func(s *corpusv1.GuestSpec) { s.Driver, s.Image = "libvirt", ref }), ""},
		{"no node runs OCI images", []*corpusv1.Node{node(func(n *corpusv1.Node) { n.Drivers = vmNode.Drivers[1:2] })},
			spec(func(s *corpusv1.GuestSpec) { s.Driver, s.Image = "libvirt", ref }), "not OCI images such as " + ref},
	} {
		got := OCIRefusal(tc.nodes, tc.spec)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: OCIRefusal = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCommandRefusal: a command or args for an image a driver builds
// itself is refused, and such a node does not fit the guest; for an OCI
// reference, or any image on a driver that lists none, they are taken.
func TestCommandRefusal(t *testing.T) {
	n := node(func(n *corpusv1.Node) {
		n.Drivers = []*corpusv1.DriverInfo{
			{Name: "lxc", Healthy: true, Images: []string{"busybox"}, OciImages: true},
			{Name: "kubernetes", Healthy: true},
		}
	})
	ref := "registry.example:5000/team/app:1"
	withArgs := func(driver, image string) *corpusv1.GuestSpec {
		return spec(func(s *corpusv1.GuestSpec) { s.Driver, s.Image, s.Args = driver, image, []string{"serve"} })
	}
	for _, tc := range []struct {
		name string
		spec *corpusv1.GuestSpec
		want string // in the refusal; "" for none
	}{
		{"lxc, a built image", withArgs("lxc", "busybox"), "driver lxc builds image busybox itself"},
		{"lxc, an OCI image", withArgs("lxc", ref), ""},
		{"kubernetes, any image", withArgs("kubernetes", "nginx:1.27"), ""},
		{"no command", spec(), ""},
		{"no node with the driver", withArgs("libvirt", "debian/bookworm"), ""},
	} {
		got := CommandRefusal([]*corpusv1.Node{n}, tc.spec)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: CommandRefusal = %q, want %q", tc.name, got, tc.want)
		}
		_, why := KindUnfit(n, tc.spec, "")
		if unfit := strings.Contains(why, "without a command"); unfit != (tc.want != "") {
			t.Errorf("%s: KindUnfit = %q", tc.name, why)
		}
	}
}
