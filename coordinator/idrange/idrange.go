// Package idrange gives guests their ranges of their node's user and
// group ids: each unprivileged guest of a driver that keeps ranges
// (DriverInfo.id_ranges) gets one of 1..id_ranges unique among the
// guests on its node, the lowest free, so a guest's files and processes
// never share an owner with another guest's on the host. Range 0 is the
// one guests without a range of their own share.
//
// The functions are pure: the state machine calls them as it applies a
// placement and every replica picks the same range; the scheduler calls
// them to leave a node with no range free out.
package idrange

import corpusv1 "corpus/proto/corpus/v1"

// Capacity is how many ranges guest spec gets one of on a node where
// its driver is drv: drv's id_ranges, or 0 when the guest takes none
// there (a privileged guest, a driver without ranges, no driver).
func Capacity(drv *corpusv1.DriverInfo, spec *corpusv1.GuestSpec) uint32 {
	if spec.GetPrivileged() {
		return 0
	}
	return drv.GetIdRanges()
}

// Used returns the ranges taken on a node: by its guests, and by the old
// copies of guests migrating away from it (leaving), which run on in
// theirs until the new copy runs.
func Used(guests, leaving []*corpusv1.Guest) map[uint32]bool {
	used := make(map[uint32]bool, len(guests)+len(leaving))
	for _, g := range guests {
		if g.IdRange != 0 {
			used[g.IdRange] = true
		}
	}
	for _, g := range leaving {
		if g.PreviousIdRange != 0 {
			used[g.PreviousIdRange] = true
		}
	}
	return used
}

// Taken counts the ranges Used would return (ranges are unique on a
// node), without listing them.
func Taken(guests, leaving []*corpusv1.Guest) int {
	n := 0
	for _, g := range guests {
		if g.IdRange != 0 {
			n++
		}
	}
	for _, g := range leaving {
		if g.PreviousIdRange != 0 {
			n++
		}
	}
	return n
}

// Lowest returns the lowest range of 1..capacity not in used, and false
// when every one is.
func Lowest(capacity uint32, used map[uint32]bool) (uint32, bool) {
	for r := uint32(1); r <= capacity; r++ {
		if !used[r] {
			return r, true
		}
	}
	return 0, false
}
