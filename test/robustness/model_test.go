package robustness

import (
	"fmt"
	"testing"

	"github.com/anishathalye/porcupine"
)

// An operation of the workload, on one key of one kind of object (a DNS
// record, a guest): add creates it once (the API answers created, or
// that it existed: both are acknowledgements), read asks whether it
// exists, linearizably (Corpus-Consistency).
type opInput struct {
	Kind string // "add" or "read"
	Key  string // "dns/NAME" or "guest/NAME"
}

// Outputs.
const (
	outCreated = "created"
	outExisted = "existed"
	outPresent = "present"
	outAbsent  = "absent"
	// outUnknown: an add whose answer was lost (timeout, connection cut
	// after sending, a leader that lost its term): it may take effect
	// at any time, or never. Its return time is infinite.
	outUnknown = "unknown"
)

// createOnceModel: per key, whether the object exists. An add that
// created it must find it absent; one that says it existed, and a read
// that finds it, must find it present; a read that does not, absent. An
// unknown add is linearized wherever it fits (porcupine places it after
// everything when it never took effect as far as anyone saw).
var createOnceModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(opInput).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		exists := state.(bool)
		switch output.(string) {
		case outCreated:
			return !exists, true
		case outExisted:
			return exists, true
		case outPresent:
			return exists, exists
		case outAbsent:
			return !exists, exists
		default: // an unknown add
			return true, true
		}
	},
	Equal: func(a, b any) bool { return a.(bool) == b.(bool) },
	DescribeOperation: func(input, output any) string {
		in := input.(opInput)
		return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Key, output)
	},
}

// TestModelCatchesAnomalies: the checker is not vacuous: the anomalies a
// faulty group shows (a lost write read back absent, a double create, a
// stale read) fail it; legal histories pass.
func TestModelCatchesAnomalies(t *testing.T) {
	op := func(c int, kind string, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: opInput{kind, "dns/k"}, Call: call, Output: out, Return: ret}
	}
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		ok   bool
	}{
		{"create, then read present", []porcupine.Operation{op(0, "add", 0, 1, outCreated), op(1, "read", 2, 3, outPresent)}, true},
		{"created twice", []porcupine.Operation{op(0, "add", 0, 1, outCreated), op(1, "add", 2, 3, outCreated)}, false},
		{"acknowledged, then read absent (lost or stale)", []porcupine.Operation{op(0, "add", 0, 1, outCreated), op(1, "read", 2, 3, outAbsent)}, false},
		{"present before any add", []porcupine.Operation{op(0, "read", 0, 1, outPresent), op(1, "add", 2, 3, outCreated)}, false},
		{"present, then absent, while the create is in flight", []porcupine.Operation{op(0, "add", 0, 10, outCreated), op(1, "read", 1, 2, outPresent), op(2, "read", 3, 4, outAbsent)}, false},
		{"an unknown add explains a later present", []porcupine.Operation{op(0, "add", 0, 1<<62, outUnknown), op(1, "read", 2, 3, outPresent)}, true},
		{"an unknown add that never happened", []porcupine.Operation{op(0, "add", 0, 1<<62, outUnknown), op(1, "read", 2, 3, outAbsent)}, true},
	} {
		if got := porcupine.CheckOperations(createOnceModel, tc.h); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
