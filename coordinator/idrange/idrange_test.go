package idrange

import (
	"testing"

	corpusv1 "corpus/proto/corpus/v1"
)

func TestLowest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		capacity uint32
		used     []uint32
		want     uint32
		ok       bool
	}{
		{"empty node", 5, nil, 1, true},
		{"after the taken", 5, []uint32{1, 2}, 3, true},
		{"a freed one first", 5, []uint32{1, 3, 4}, 2, true},
		{"the last", 3, []uint32{1, 2}, 3, true},
		{"none free", 3, []uint32{1, 2, 3}, 0, false},
		{"none at all", 0, nil, 0, false},
		{"taken beyond the capacity (it shrank) do not count", 2, []uint32{7}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			used := map[uint32]bool{}
			for _, r := range tc.used {
				used[r] = true
			}
			if got, ok := Lowest(tc.capacity, used); got != tc.want || ok != tc.ok {
				t.Errorf("Lowest(%d, %v) = %d, %v; want %d, %v", tc.capacity, tc.used, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestNoOverlap: guests placed one after another, some deleted between,
// never share a range, each gets the lowest free, and the same history
// gives the same ranges.
func TestNoOverlap(t *testing.T) {
	t.Parallel()
	run := func() []uint32 {
		var guests []*corpusv1.Guest
		var got []uint32
		for i := range 200 {
			if i%3 == 2 { // a delete now and then, in the middle
				guests = append(guests[:len(guests)/2], guests[len(guests)/2+1:]...)
			}
			used := Used(guests, nil)
			r, ok := Lowest(256, used)
			if !ok {
				t.Fatalf("placement %d: no range free of 256 with %d guests", i, len(guests))
			}
			if used[r] {
				t.Fatalf("placement %d: range %d given twice", i, r)
			}
			for q := uint32(1); q < r; q++ {
				if !used[q] {
					t.Fatalf("placement %d: range %d given while %d is free", i, r, q)
				}
			}
			guests = append(guests, &corpusv1.Guest{IdRange: r})
			got = append(got, r)
		}
		return got
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("placement %d: range %d, then %d for the same history", i, a[i], b[i])
		}
	}
}

func TestUsedAndCapacity(t *testing.T) {
	t.Parallel()
	used := Used([]*corpusv1.Guest{{IdRange: 2}, {IdRange: 0}}, []*corpusv1.Guest{{IdRange: 9, PreviousIdRange: 4}})
	if len(used) != 2 || !used[2] || !used[4] {
		t.Errorf("Used = %v, want 2 (a guest's) and 4 (an old copy's)", used)
	}
	lxc := &corpusv1.DriverInfo{Name: "lxc", IdRanges: 10}
	for _, tc := range []struct {
		drv  *corpusv1.DriverInfo
		spec *corpusv1.GuestSpec
		want uint32
	}{
		{lxc, &corpusv1.GuestSpec{}, 10},
		{lxc, &corpusv1.GuestSpec{Privileged: true}, 0},
		{&corpusv1.DriverInfo{Name: "libvirt"}, &corpusv1.GuestSpec{}, 0},
		{nil, &corpusv1.GuestSpec{}, 0},
	} {
		if got := Capacity(tc.drv, tc.spec); got != tc.want {
			t.Errorf("Capacity(%v, %v) = %d, want %d", tc.drv, tc.spec, got, tc.want)
		}
	}
}
