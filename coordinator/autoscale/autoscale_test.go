package autoscale

import (
	"strings"
	"testing"
	"time"

	corpusv1 "corpus/proto/corpus/v1"
)

func TestDecide(t *testing.T) {
	p := &corpusv1.AutoscalePolicy{Min: 2, Max: 10, TargetRps: 100, ScaleDownWindowSeconds: 60}
	t0 := time.Unix(1_700_000_000, 0)
	var r Recommender
	// Within the tolerance: no change.
	if n, why := r.Decide(t0, p, 2, Load{PerInstance: 108, What: "rps"}); n != 2 || !strings.Contains(why, "holds") {
		t.Errorf("108 rps per instance of 100 = %d (%s)", n, why)
	}
	// Twice the target: twice the count.
	if n, _ := r.Decide(t0.Add(15*time.Second), p, 2, Load{PerInstance: 200, What: "rps"}); n != 4 {
		t.Errorf("200 rps of 100 on 2 = %d, want 4", n)
	}
	// Ten times: at most double or +4 per step, and never past max.
	if n, why := r.Decide(t0.Add(30*time.Second), p, 4, Load{PerInstance: 1000, What: "rps"}); n != 8 || !strings.Contains(why, "at most 8") {
		t.Errorf("1000 rps of 100 on 4 = %d (%s), want 8", n, why)
	}
	if n, _ := r.Decide(t0.Add(45*time.Second), p, 8, Load{PerInstance: 1000, What: "rps"}); n != 10 {
		t.Errorf("past max = %d, want 10", n)
	}
	// The load drops: held while the window remembers the high ones.
	if n, why := r.Decide(t0.Add(60*time.Second), p, 10, Load{PerInstance: 10, What: "rps"}); n != 10 || !strings.Contains(why, "held") {
		t.Errorf("a drop inside the window = %d (%s), want held at 10", n, why)
	}
	// Once the window has only low recommendations: down, not below min.
	var n uint32
	for i := range 6 {
		n, _ = r.Decide(t0.Add(time.Duration(120+15*i)*time.Second), p, 10, Load{PerInstance: 10, What: "rps"})
	}
	if n != 2 {
		t.Errorf("after the window = %d, want min 2", n)
	}
	// Below min: brought up to it.
	var fresh Recommender
	if n, _ := fresh.Decide(t0, p, 1, Load{PerInstance: 100, What: "rps"}); n != 2 {
		t.Errorf("1 below min 2 = %d", n)
	}
}

// TestSteadyLoadDoesNotFlap: a load wobbling ±30% around the target for
// an hour changes the count only at first.
func TestSteadyLoadDoesNotFlap(t *testing.T) {
	p := &corpusv1.AutoscalePolicy{Min: 1, Max: 10, TargetCpuPercent: 60, ScaleDownWindowSeconds: 300}
	var r Recommender
	t0 := time.Unix(1_700_000_000, 0)
	count, changes := uint32(4), 0
	total := 240.0 // CPU percent over all instances, wobbling
	for i := range 240 {
		wobble := []float64{1.3, 0.7, 1.1, 0.9}[i%4]
		n, _ := r.Decide(t0.Add(time.Duration(i)*15*time.Second), p, count, Load{PerInstance: total * wobble / float64(count), What: "cpu"})
		if n != count {
			changes++
			count = n
		}
	}
	if changes > 2 {
		t.Errorf("%d changes in an hour of a steady load (count %d)", changes, count)
	}
}
