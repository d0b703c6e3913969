package api

import (
	"time"

	corpusv1 "corpus/proto/corpus/v1"
)

// SeriesSource is what the dashboard plots: the series this replica
// sampled (coordinator/series' Sampler).
type SeriesSource interface {
	// Series returns the series of the given names (all when none), and
	// the time between their points.
	Series(names ...string) ([]*corpusv1.Series, time.Duration)
}
