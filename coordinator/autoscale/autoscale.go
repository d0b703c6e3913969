// Package autoscale decides process counts from load, as the Kubernetes
// HorizontalPodAutoscaler does: the count that brings the per-instance
// metric to its target (desired = ceil(count × metric / target)), nothing
// within a 10% tolerance, within the policy's min and max. Scale-ups take
// effect at once but at most double the count (or add 4, whichever is
// more) per decision; scale-downs go to the highest recommendation of the
// stabilization window, so a load that dips for a moment does not remove
// instances that the next minute needs: no flapping under a steady load.
//
// A Recommender keeps the recommendations of one process type; it lives
// on the Raft leader with the Loop that samples the agents, and a new
// leader starts with an empty window (it scales down no sooner than the
// window after taking over).
package autoscale

import (
	"fmt"
	"math"
	"time"

	corpusv1 "corpus/proto/corpus/v1"
)

// Tolerance is the relative distance to the target within which the
// count stays.
const Tolerance = 0.1

// DefaultDownWindow is the stabilization window of scale-downs when the
// policy names none (the HPA's default).
const DefaultDownWindow = 5 * time.Minute

// Load is one reading of a process type's load.
type Load struct {
	// PerInstance is the metric the policy targets, averaged over the
	// instances: CPU percent of each guest's allowance, or requests per
	// second.
	PerInstance float64
	// What names the metric for reasons ("cpu", "rps").
	What string
}

type rec struct {
	at    time.Time
	count uint32
}

// Recommender decides one process type's count over time.
type Recommender struct {
	recs []rec
}

// Decide returns the count to run now given the current count and a
// load reading, and why in words an operator reads in the audit log.
func (r *Recommender) Decide(now time.Time, p *corpusv1.AutoscalePolicy, current uint32, l Load) (uint32, string) {
	target := float64(p.GetTargetCpuPercent())
	if p.GetTargetRps() > 0 {
		target = p.GetTargetRps()
	}
	raw := current
	ratio := 0.0
	if target > 0 && current > 0 {
		ratio = l.PerInstance / target
		if math.Abs(ratio-1) > Tolerance {
			raw = uint32(math.Ceil(float64(current) * ratio))
		}
	}
	raw = clamp(raw, p.GetMin(), p.GetMax())
	window := time.Duration(p.GetScaleDownWindowSeconds()) * time.Second
	if window <= 0 {
		window = DefaultDownWindow
	}
	r.recs = append(r.recs, rec{now, raw})
	keep := r.recs[:0]
	for _, x := range r.recs {
		if now.Sub(x.at) <= window {
			keep = append(keep, x)
		}
	}
	r.recs = keep
	load := fmt.Sprintf("%s %.1f per instance against a target of %.1f", l.What, l.PerInstance, target)
	switch {
	case raw > current:
		limit := max(2*current, current+4)
		out := min(raw, limit)
		why := fmt.Sprintf("%s: %d -> %d", load, current, out)
		if out < raw {
			why += fmt.Sprintf(" (%d wanted; at most %d per step)", raw, limit)
		}
		return out, why
	case raw < current:
		// The highest recommendation of the window.
		highest := raw
		for _, x := range r.recs {
			highest = max(highest, x.count)
		}
		if highest >= current {
			return current, fmt.Sprintf("%s: %d would do, held at %d for the %s window", load, raw, current, window)
		}
		return highest, fmt.Sprintf("%s: %d -> %d (the highest of the last %s)", load, current, highest, window)
	}
	if current < p.GetMin() || current > p.GetMax() {
		return raw, fmt.Sprintf("%d is outside %d–%d", current, p.GetMin(), p.GetMax())
	}
	return current, fmt.Sprintf("%s: %d holds", load, current)
}

func clamp(n, lo, hi uint32) uint32 {
	if n < lo {
		return lo
	}
	if hi > 0 && n > hi {
		return hi
	}
	return n
}
