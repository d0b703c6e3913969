package scheduler

// PlanUpTo is planUpTo, for the tests of the pass limit.
var PlanUpTo = planUpTo
