package linearizable

import (
	"time"

	"github.com/anishathalye/porcupine"
)

// Check checks history against Model, each key on its own, after
// Tighten: what porcupine answers for the history as recorded, in far
// less time when many writes' outcomes are unknown.
func Check(history []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model, Tighten(history), timeout)
}

// Tighten bounds the writes whose outcome is unknown where the history
// itself bounds them, and drops those that cannot matter, so that the
// checker need not try each of them at every later point: a history
// with a few hundred unknown writes that is not linearizable otherwise
// takes longer to prove so than any run may wait (porcupine tries every
// subset of the writes still pending), and one that is takes no time.
// The result is linearizable exactly when history is:
//
//   - On a key only ever added (never deleted), the first operation to
//     return having seen the object (created, existed, made, present)
//     ends every unknown add's window: one not in effect by then did
//     nothing after it, as the object was already there. An unknown
//     add called after that return did nothing at all and is dropped.
//   - On a register, each write's value is its own: an unknown write
//     whose value no read returned may have taken effect last of all,
//     where nothing sees it, and is dropped; one a read returned was in
//     effect before that read returned.
//
// Keys with deletes keep their unknown operations as they are.
func Tighten(history []porcupine.Operation) []porcupine.Operation {
	type keyInfo struct {
		deletes, sets bool
		seen          int64            // first return that saw the object
		read          map[string]int64 // a register's value: first return of a read of it
		written       map[string]int   // a register's value: the writes of it
	}
	keys := map[string]*keyInfo{}
	info := func(k string) *keyInfo {
		ki := keys[k]
		if ki == nil {
			ki = &keyInfo{seen: Never, read: map[string]int64{}, written: map[string]int{}}
			keys[k] = ki
		}
		return ki
	}
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(string)
		ki := info(in.Key)
		switch in.Kind {
		case Delete:
			ki.deletes = true
		case Set:
			ki.sets = true
			ki.written[in.Value]++
		case Get:
			if r, ok := ki.read[out]; !ok || op.Return < r {
				ki.read[out] = op.Return
			}
		}
		if out != Unknown && (out == Created || out == Existed || out == Made || out == Present) && op.Return < ki.seen {
			ki.seen = op.Return
		}
	}
	out := make([]porcupine.Operation, 0, len(history))
	for _, op := range history {
		in := op.Input.(Input)
		ki := keys[in.Key]
		if op.Output.(string) == Unknown {
			switch {
			case in.Kind == Add && !ki.deletes && !ki.sets:
				if op.Call >= ki.seen {
					continue
				}
				op.Return = min(op.Return, ki.seen)
			case in.Kind == Set && ki.written[in.Value] == 1:
				r, ok := ki.read[in.Value]
				if !ok {
					continue
				}
				op.Return = min(op.Return, r)
			}
		}
		out = append(out, op)
	}
	return out
}
