// Package revert undoes the finished steps of a multi-step side effect when
// a later step fails, so a half-built bridge, veth or NAT rule is not left
// behind:
//
//	r := revert.New()
//	defer r.Fail()
//	if err := step1(); err != nil {
//		return err
//	}
//	r.Add(undoStep1)
//	if err := step2(); err != nil {
//		return err // undoStep1 runs
//	}
//	r.Add(undoStep2)
//	r.Success() // keep everything; the deferred Fail does nothing
//
// A Reverter is not safe for concurrent use; it belongs to the goroutine
// that runs the steps.
package revert

// Hook undoes one step. It reports its own failures (by logging them), since
// by the time it runs the caller is already returning another error.
type Hook func()

// Reverter collects undo hooks and runs them in reverse order unless the
// operation succeeded.
type Reverter struct {
	hooks []Hook
	done  bool
}

// New returns an empty Reverter.
func New() *Reverter {
	return &Reverter{}
}

// Add registers h to run on Fail. Hooks run last-added first, so each undo
// sees the state its step left. A nil hook is ignored.
func (r *Reverter) Add(h Hook) {
	if h != nil {
		r.hooks = append(r.hooks, h)
	}
}

// Fail runs every registered hook, newest first, unless Success or Fail
// was called before; it is meant to be deferred right after New.
func (r *Reverter) Fail() {
	if r.done {
		return
	}
	r.done = true
	for i := len(r.hooks) - 1; i >= 0; i-- {
		r.hooks[i]()
	}
	r.hooks = nil
}

// Success marks the operation as complete: a later Fail does nothing.
func (r *Reverter) Success() {
	r.done = true
	r.hooks = nil
}

// Clone returns a new Reverter holding the same hooks. A function that
// builds something in steps can hand the undo to its caller:
//
//	undo := r.Clone().Fail
//	r.Success()
//	return undo, nil
func (r *Reverter) Clone() *Reverter {
	if r.done {
		return &Reverter{}
	}
	return &Reverter{hooks: append([]Hook(nil), r.hooks...)}
}
