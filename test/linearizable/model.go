// Package linearizable is the model the control plane's histories are
// checked against with porcupine (test/robustness, test/e2e), per key:
// objects that are created and deleted (DNS records, guests), and
// registers written and read (an environment's config keys).
package linearizable

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Input is an operation on one key. On an object: Add creates it (the
// API answers created, or that it existed: both are acknowledgements),
// Delete removes it (deleted, or that there was none), Read asks
// whether it exists. On a register: Set writes Value, Get reads it.
// Reads are linearizable reads (Corpus-Consistency).
type Input struct {
	Kind  string // Add, Delete, Read, Set or Get
	Key   string // "dns/NAME", "guest/NAME", "config/KEY", ...
	Value string // what Set writes
	// Via names the replica that took the call (for the reader of a
	// failed check; the model ignores it).
	Via string
}

// Kinds of operation.
const (
	Add    = "add"
	Delete = "delete"
	Read   = "read"
	Set    = "set"
	Get    = "get"
)

// Outputs. A Get's output is the value read ("" for none).
const (
	Created  = "created"
	Existed  = "existed"
	Deleted  = "deleted"
	NotFound = "not found"
	Present  = "present"
	Absent   = "absent"
	Written  = "written"
	// Made answers an add asked again after an earlier try's answer
	// was lost: it exists, made by this call or by that try.
	Made = "made"
	// Unknown: a write whose answer was lost (timeout, connection cut
	// after sending, a leader that lost its term): it may take effect
	// at any time, or never. Its return time is Never.
	Unknown = "unknown"
)

// Never is the return time of an operation whose outcome is unknown.
const Never = int64(1) << 62

// present is an object's state when it exists ("" when it does not); a
// register's state is its value.
const present = "\x00present"

// Model checks histories per key: each key's operations are linearized
// on their own (porcupine's partitions), its state a string.
var Model = porcupine.Model{
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
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(Input), output.(string)
		exists := st != ""
		switch in.Kind {
		case Add:
			switch out {
			case Created:
				return !exists, present
			case Existed:
				return exists, st
			case Made:
				return true, present
			case Unknown: // done now, or never (then linearized last)
				return true, present
			}
		case Delete:
			switch out {
			case Deleted:
				return exists, ""
			case NotFound:
				return !exists, ""
			case Unknown:
				return true, ""
			}
		case Read:
			switch out {
			case Present:
				return exists, st
			case Absent:
				return !exists, st
			}
		case Set:
			if out == Written || out == Unknown {
				return true, in.Value
			}
		case Get:
			return out == st, st
		}
		return false, st
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in := input.(Input)
		via := ""
		if in.Via != "" {
			via = " via " + in.Via
		}
		if in.Kind == Set {
			return fmt.Sprintf("set(%s, %q)%s -> %s", in.Key, in.Value, via, output)
		}
		return fmt.Sprintf("%s(%s)%s -> %q", in.Kind, in.Key, via, output)
	},
}
