package compat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	corpusv1 "corpus/proto/corpus/v1"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    Version
		wantErr bool
	}{
		{"", Version{}, false},
		{"v0.1", Version{0, 1}, false},
		{"0.1", Version{0, 1}, false},
		{"v1.12.3", Version{1, 12}, false},
		{"v0.1.0+3", Version{0, 1}, false},
		{"v0.2+4", Version{0, 2}, false},
		{"dev", Version{}, true},
		{"v1", Version{}, true},
		{"v-1.2", Version{}, true},
		{"vx.y", Version{}, true},
	} {
		got, err := Parse(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("Parse(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestLessAndString(t *testing.T) {
	t.Parallel()
	if !(Version{0, 9}).Less(Version{1, 0}) || !(Version{0, 1}).Less(Version{0, 2}) || (Version{0, 2}).Less(Version{0, 2}) || (Version{1, 0}).Less(Version{0, 9}) {
		t.Error("Less orders versions wrong")
	}
	if got := (Version{0, 1}).String(); got != "v0.1" {
		t.Errorf("String() = %q, want v0.1", got)
	}
	if got := (Version{}).String(); got != "none" {
		t.Errorf("zero String() = %q, want none", got)
	}
}

// TestCheck: a feature is refused below its release with a message
// saying what to do, and allowed from it on.
func TestCheck(t *testing.T) {
	t.Parallel()
	if err := Check(Version{0, 1}, GuestIDRanges); err != nil {
		t.Errorf("Check(v0.1, %s) = %v, want nil", GuestIDRanges, err)
	}
	err := Check(Version{}, GuestIDRanges)
	want := "guest-id-ranges needs every coordinator at v0.1 (the group runs none); upgrade the rest first"
	if !errors.Is(err, ErrNeedsUpgrade) || err.Error() != want {
		t.Errorf("Check(none, %s) = %v, want %q wrapping ErrNeedsUpgrade", GuestIDRanges, err, want)
	}
	if !Allows(Version{}, ClusterVersion) {
		t.Error("the cluster version entry itself is gated; no group could ever set one")
	}
}

// TestTable: every feature's release is one this binary has reached,
// and every entry kind the table names is a Command kind.
func TestTable(t *testing.T) {
	t.Parallel()
	for f, row := range features {
		if Current.Less(row.since) {
			t.Errorf("feature %s is from %s, past this binary's %s: raise Current", f, row.since, Current)
		}
	}
	kinds := (&corpusv1.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd").Fields()
	for f, row := range features {
		for _, e := range row.entries {
			if kinds.ByName(protoreflect.Name(e)) == nil {
				t.Errorf("feature %s names entry kind %s, which Command does not have", f, e)
			}
		}
	}
	if f, ok := EntryFeature("set_cluster_version"); !ok || f != ClusterVersion {
		t.Errorf("EntryFeature(set_cluster_version) = %s, %v; want %s", f, ok, ClusterVersion)
	}
	if _, ok := EntryFeature("create_guest"); ok {
		t.Error("create_guest, of the first release, has a feature")
	}
}

// TestCurrentFollowsReleases: this binary's server version is at least
// the last release listed in packaging/releases (a tree past a release
// is that release or the next one).
func TestCurrentFollowsReleases(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "packaging", "releases"))
	if err != nil {
		t.Fatal(err)
	}
	var last Version
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v, err := Parse(f[0])
		if err != nil || len(f) != 2 || len(f[1]) != 40 {
			t.Fatalf("packaging/releases line %q: want VERSION COMMIT (a full hash): %v", line, err)
		}
		if v.Less(last) {
			t.Errorf("packaging/releases lists %s after %s: oldest first", v, last)
		}
		last = v
	}
	if Current.Less(last) {
		t.Errorf("Current = %s, older than the last release %s: raise it", Current, last)
	}
}
