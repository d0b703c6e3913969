package series

import (
	"testing"
	"time"
)

func TestStoreKeepsCapacityAndDropsStale(t *testing.T) {
	s := New(3)
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		samples := []Sample{{Name: "a", Labels: map[string]string{"node": "n1"}, Value: float64(i)}}
		if i == 0 {
			samples = append(samples, Sample{Name: "b", Labels: map[string]string{"domain": "x"}, Value: 9})
		}
		s.Add(t0.Add(time.Duration(i)*time.Second), samples)
	}
	got := s.Get()
	if len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("series = %+v, want only a (b got no point for 3 rounds)", got)
	}
	var vals []float64
	for _, p := range got[0].Points {
		vals = append(vals, p.Value)
	}
	if len(vals) != 3 || vals[0] != 2 || vals[2] != 4 {
		t.Errorf("points = %v, want [2 3 4]", vals)
	}
	if g := s.Get("b"); len(g) != 0 {
		t.Errorf("Get(b) = %+v", g)
	}
	// The copy is the caller's.
	got[0].Points[0].Value = 99
	if s.Get("a")[0].Points[0].Value != 2 {
		t.Error("Get returned the store's own points")
	}
}

func TestRates(t *testing.T) {
	r := Rates(map[string]uint64{"a": 10, "b": 50}, map[string]uint64{"a": 40, "b": 5, "c": 3}, 10*time.Second)
	want := map[string]float64{"a": 3, "b": 0.5, "c": 0.3}
	for k, v := range want {
		if d := r[k] - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("rate %s = %v, want %v", k, r[k], v)
		}
	}
	if len(Rates(nil, map[string]uint64{"a": 1}, 0)) != 0 {
		t.Error("rates over no time")
	}
}
