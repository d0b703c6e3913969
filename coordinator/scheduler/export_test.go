package scheduler

// PlanUpTo is planUpTo, for the tests of the pass limit.
var PlanUpTo = planUpTo

// ByShape turns placing by shape on or off for a test; the returned
// function restores it.
func ByShape(on bool) (restore func()) {
	was := byShape
	byShape = on
	return func() { byShape = was }
}
