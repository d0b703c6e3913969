package linearizable

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// history makes n operations of kinds on key by clients that overlap:
// each takes effect at a random point between its call and return,
// and its output is what the key held there. A write's outcome is
// unknown with probability unknown.
func history(rng *rand.Rand, key string, kinds []string, n, clients int, longest int64, unknown float64) []porcupine.Operation {
	type timed struct {
		op porcupine.Operation
		at int64
	}
	var ops []timed
	free := make([]int64, clients)
	for i := 0; i < n; i++ {
		c := rng.IntN(clients)
		call := free[c] + rng.Int64N(50)
		took := 1 + rng.Int64N(longest)
		in := Input{Kind: kinds[rng.IntN(len(kinds))], Key: key}
		if in.Kind == Set {
			in.Value = fmt.Sprint("v", i)
		}
		ops = append(ops, timed{porcupine.Operation{ClientId: c, Input: in, Call: call, Return: call + took}, call + rng.Int64N(took)})
		free[c] = call + took
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].at < ops[j].at })
	var st string
	h := make([]porcupine.Operation, 0, n)
	for _, t := range ops {
		op, in := t.op, t.op.Input.(Input)
		switch in.Kind {
		case Add:
			op.Output = map[bool]string{true: Existed, false: Created}[st != ""]
			st = present
		case Delete:
			op.Output = map[bool]string{true: Deleted, false: NotFound}[st != ""]
			st = ""
		case Read:
			op.Output = map[bool]string{true: Present, false: Absent}[st != ""]
		case Set:
			op.Output, st = Written, in.Value
		case Get:
			op.Output = st
		}
		if in.Kind != Read && in.Kind != Get && rng.Float64() < unknown {
			op.Output, op.Return = Unknown, Never
		}
		h = append(h, op)
	}
	return h
}

// spoil changes one read's answer, which usually makes h not
// linearizable.
func spoil(rng *rand.Rand, h []porcupine.Operation) {
	var reads []int
	for i, op := range h {
		if k := op.Input.(Input).Kind; k == Read || k == Get {
			reads = append(reads, i)
		}
	}
	if len(reads) == 0 {
		return
	}
	i := reads[rng.IntN(len(reads))]
	switch h[i].Output {
	case Present:
		h[i].Output = Absent
	case Absent:
		h[i].Output = Present
	default:
		h[i].Output = "v-never-written"
	}
}

var shapes = []struct {
	key   string
	kinds []string
}{
	{"dns/k", []string{Add, Add, Read}},
	{"gdel/k", []string{Add, Delete, Read}},
	{"config/K", []string{Set, Get}},
}

// TestTightenKeepsVerdicts: on thousands of small histories, legal and
// spoiled, of every kind of key, porcupine answers the same for a
// history and for its tightened form.
func TestTightenKeepsVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 41))
	counts := map[bool]int{}
	for i := 0; i < 6000; i++ {
		s := shapes[i%len(shapes)]
		h := history(rng, s.key, s.kinds, 3+rng.IntN(10), 1+rng.IntN(4), 1+rng.Int64N(300), rng.Float64()*0.6)
		if rng.IntN(2) == 0 {
			spoil(rng, h)
		}
		want := porcupine.CheckOperations(Model, h)
		if got := porcupine.CheckOperations(Model, Tighten(h)); got != want {
			t.Fatalf("history %d (%s): linearizable %v, tightened %v:\n%v\ntightened:\n%v", i, s.key, want, got, h, Tighten(h))
		}
		counts[want]++
	}
	// Both verdicts were met often enough for the comparison to mean
	// something.
	if counts[true] < 1000 || counts[false] < 1000 {
		t.Fatalf("linearizable %d, not %d: too few of one kind", counts[true], counts[false])
	}
}

// TestCheckDecidesManyUnknowns: a history of the size the robustness
// lab records, with a third of its writes unknown, is decided (not
// left Unknown) for every kind of key, whether it is linearizable or
// not. Porcupine alone leaves the spoiled create-once and register
// histories undecided for far longer than the budget.
func TestCheckDecidesManyUnknowns(t *testing.T) {
	rng := rand.New(rand.NewPCG(455419, 1))
	for _, s := range shapes {
		for _, spoilt := range []bool{false, true} {
			for i := 0; i < 5; i++ {
				h := history(rng, s.key, s.kinds, 300, 6, 2000, 0.35)
				if spoilt {
					spoil(rng, h)
				}
				res, _ := Check(h, time.Minute)
				if res == porcupine.Unknown || !spoilt && res != porcupine.Ok {
					t.Errorf("%s, spoilt %t, history %d: %v", s.key, spoilt, i, res)
				}
			}
		}
	}
}

// TestTightenDropsOnlyWhatCannotMatter: the unknown writes it drops and
// the windows it closes, by example.
func TestTightenDropsOnlyWhatCannotMatter(t *testing.T) {
	add := func(c int, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: Input{Kind: Add, Key: "dns/k"}, Call: call, Output: out, Return: ret}
	}
	set := func(c int, v string, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: Input{Kind: Set, Key: "config/K", Value: v}, Call: call, Output: out, Return: ret}
	}
	get := func(c int, call, ret int64, v string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: Input{Kind: Get, Key: "config/K"}, Call: call, Output: v, Return: ret}
	}
	del := porcupine.Operation{ClientId: 3, Input: Input{Kind: Delete, Key: "gdel/k"}, Call: 0, Output: Unknown, Return: Never}
	h := []porcupine.Operation{
		add(0, 0, Never, Unknown), // before the first sight: closed at 5
		add(1, 2, 5, Created),
		add(2, 6, Never, Unknown),      // after it: dropped
		set(0, "a", 0, Never, Unknown), // read at 9: closed there
		set(1, "b", 1, Never, Unknown), // never read: dropped
		get(2, 8, 9, "a"),
		get(2, 10, 12, "a"),
		del, // a key with deletes: kept as it is
	}
	got := Tighten(h)
	want := []porcupine.Operation{
		add(0, 0, 5, Unknown),
		h[1],
		set(0, "a", 0, 9, Unknown),
		h[5], h[6], del,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Tighten:\n got %v\nwant %v", got, want)
	}
}
