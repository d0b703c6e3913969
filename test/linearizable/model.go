// Package linearizable is the model the control plane's histories are
// checked against with porcupine (test/robustness, test/e2e): objects
// created once and read, per key.
package linearizable

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Input is an operation on one key of one kind of object (a DNS record,
// a guest): Add creates it once (the API answers created, or that it
// existed: both are acknowledgements), Read asks whether it exists,
// linearizably (Corpus-Consistency).
type Input struct {
	Kind string // Add or Read
	Key  string // "dns/NAME", "guest/NAME", ...
}

// Kinds of operation.
const (
	Add  = "add"
	Read = "read"
)

// Outputs.
const (
	Created = "created"
	Existed = "existed"
	Present = "present"
	Absent  = "absent"
	// Unknown: an add whose answer was lost (timeout, connection cut
	// after sending, a leader that lost its term): it may take effect
	// at any time, or never. Its return time is Never.
	Unknown = "unknown"
)

// Never is the return time of an operation whose outcome is unknown.
const Never = int64(1) << 62

// CreateOnce is the model: per key, whether the object exists. An add that
// created it must find it absent; one that says it existed, and a read
// that finds it, must find it present; a read that does not, absent. An
// unknown add is linearized wherever it fits (porcupine places it after
// everything when it never took effect as far as anyone saw).
var CreateOnce = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
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
		case Created:
			return !exists, true
		case Existed:
			return exists, true
		case Present:
			return exists, exists
		case Absent:
			return !exists, exists
		default: // an unknown add
			return true, true
		}
	},
	Equal: func(a, b any) bool { return a.(bool) == b.(bool) },
	DescribeOperation: func(input, output any) string {
		in := input.(Input)
		return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Key, output)
	},
}
