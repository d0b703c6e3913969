package linearizable

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestModelCatchesAnomalies: the checker is not vacuous: the anomalies a
// faulty group shows (a lost write read back absent, a double create, a
// stale read, a resurrected delete, a lost or reordered register write)
// fail it; legal histories pass.
func TestModelCatchesAnomalies(t *testing.T) {
	op := func(c int, kind string, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: Input{Kind: kind, Key: "dns/k"}, Call: call, Output: out, Return: ret}
	}
	set := func(c int, v string, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: Input{Kind: Set, Key: "config/K", Value: v}, Call: call, Output: out, Return: ret}
	}
	get := func(c int, call, ret int64, v string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: Input{Kind: Get, Key: "config/K"}, Call: call, Output: v, Return: ret}
	}
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		ok   bool
	}{
		{"create, then read present", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Read, 2, 3, Present)}, true},
		{"create, then existed", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Add, 2, 3, Existed)}, true},
		{"existed before any create", []porcupine.Operation{op(0, Add, 0, 1, Existed), op(1, Add, 2, 3, Created)}, false},
		{"created twice", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Add, 2, 3, Created)}, false},
		{"acknowledged, then read absent (lost or stale)", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Read, 2, 3, Absent)}, false},
		{"present before any add", []porcupine.Operation{op(0, Read, 0, 1, Present), op(1, Add, 2, 3, Created)}, false},
		{"present, then absent, while the create is in flight", []porcupine.Operation{op(0, Add, 0, 10, Created), op(1, Read, 1, 2, Present), op(2, Read, 3, 4, Absent)}, false},
		{"an unknown add explains a later present", []porcupine.Operation{op(0, Add, 0, Never, Unknown), op(1, Read, 2, 3, Present)}, true},
		{"an add asked again after a lost answer, then read", []porcupine.Operation{op(0, Add, 0, Never, Unknown), op(0, Add, 2, 3, Made), op(1, Read, 4, 5, Present)}, true},
		{"made, then read absent", []porcupine.Operation{op(0, Add, 0, 1, Made), op(1, Read, 2, 3, Absent)}, false},
		{"an unknown add that never happened", []porcupine.Operation{op(0, Add, 0, Never, Unknown), op(1, Read, 2, 3, Absent)}, true},
		{"create, delete, create again", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Delete, 2, 3, Deleted), op(0, Add, 4, 5, Created), op(1, Read, 6, 7, Present)}, true},
		{"deleted, then read present (resurrected)", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Delete, 2, 3, Deleted), op(2, Read, 4, 5, Present)}, false},
		{"deleted twice", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Delete, 2, 3, Deleted), op(2, Delete, 4, 5, Deleted)}, false},
		{"not found while it exists", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Delete, 2, 3, NotFound)}, false},
		{"an unknown delete explains absent", []porcupine.Operation{op(0, Add, 0, 1, Created), op(1, Delete, 2, Never, Unknown), op(2, Read, 4, 5, Absent)}, true},
		{"register: written, then read", []porcupine.Operation{set(0, "a", 0, 1, Written), get(1, 2, 3, "a")}, true},
		{"register: a lost write", []porcupine.Operation{set(0, "a", 0, 1, Written), get(1, 2, 3, "")}, false},
		{"register: writes read in the wrong order", []porcupine.Operation{set(0, "a", 0, 1, Written), set(0, "b", 2, 3, Written), get(1, 4, 5, "a")}, false},
		{"register: concurrent writes, either order", []porcupine.Operation{set(0, "a", 0, 5, Written), set(1, "b", 0, 5, Written), get(2, 6, 7, "a"), get(2, 8, 9, "a")}, true},
		{"register: read flips back", []porcupine.Operation{set(0, "a", 0, 5, Written), set(1, "b", 0, 5, Written), get(2, 6, 7, "a"), get(2, 8, 9, "b"), get(2, 10, 11, "a")}, false},
		{"register: an unknown write seen later", []porcupine.Operation{set(0, "a", 0, 1, Written), set(1, "b", 2, Never, Unknown), get(2, 4, 5, "b")}, true},
	} {
		if got := porcupine.CheckOperations(Model, tc.h); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
