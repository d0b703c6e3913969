package linearizable

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestModelCatchesAnomalies: the checker is not vacuous: the anomalies a
// faulty group shows (a lost write read back absent, a double create, a
// stale read) fail it; legal histories pass.
func TestModelCatchesAnomalies(t *testing.T) {
	op := func(c int, kind string, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: Input{kind, "dns/k"}, Call: call, Output: out, Return: ret}
	}
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		ok   bool
	}{
		{"create, then read present", []porcupine.Operation{op(0, "add", 0, 1, Created), op(1, "read", 2, 3, Present)}, true},
		{"create, then existed", []porcupine.Operation{op(0, "add", 0, 1, Created), op(1, "add", 2, 3, Existed)}, true},
		{"existed before any create", []porcupine.Operation{op(0, "add", 0, 1, Existed), op(1, "add", 2, 3, Created)}, false},
		{"created twice", []porcupine.Operation{op(0, "add", 0, 1, Created), op(1, "add", 2, 3, Created)}, false},
		{"acknowledged, then read absent (lost or stale)", []porcupine.Operation{op(0, "add", 0, 1, Created), op(1, "read", 2, 3, Absent)}, false},
		{"present before any add", []porcupine.Operation{op(0, "read", 0, 1, Present), op(1, "add", 2, 3, Created)}, false},
		{"present, then absent, while the create is in flight", []porcupine.Operation{op(0, "add", 0, 10, Created), op(1, "read", 1, 2, Present), op(2, "read", 3, 4, Absent)}, false},
		{"an unknown add explains a later present", []porcupine.Operation{op(0, "add", 0, Never, Unknown), op(1, "read", 2, 3, Present)}, true},
		{"an unknown add that never happened", []porcupine.Operation{op(0, "add", 0, Never, Unknown), op(1, "read", 2, 3, Absent)}, true},
	} {
		if got := porcupine.CheckOperations(CreateOnce, tc.h); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
