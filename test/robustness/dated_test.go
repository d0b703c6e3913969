package robustness

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestDatedInOrder: guests of one batch entry may come in any order (they
// share its index), but a guest of a later entry dated before one of an
// earlier entry is the cluster's time going back.
func TestDatedInOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	guest := func(name string, index uint64, ms int) *corpusv1.GetGuestResponse {
		return &corpusv1.GetGuestResponse{Guest: &corpusv1.Guest{Name: name, CreateIndex: index,
			CreatedAt: timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))}}
	}
	if err := datedInOrder([]*corpusv1.GetGuestResponse{
		guest("a", 5, 10), guest("b", 7, 30), guest("c", 7, 20), guest("d", 7, 40), guest("e", 9, 40),
	}); err != nil {
		t.Errorf("one entry's guests in any order: %v", err)
	}
	err := datedInOrder([]*corpusv1.GetGuestResponse{
		guest("a", 5, 10), guest("b", 7, 30), guest("c", 7, 50), guest("d", 9, 40),
	})
	if err == nil || !strings.Contains(err.Error(), "guest d (index 9)") || !strings.Contains(err.Error(), "before guest c (index 7") {
		t.Errorf("a later entry dated before an earlier one = %v, want the time going back, d before c", err)
	}
}

func TestSqueeze(t *testing.T) {
	in := []string{
		`time=1 level=INFO msg="raft leadership changed" leader=true`,
		`time=2 level=WARN msg="failed to get previous log" previous-index=9`,
		`time=3 level=WARN msg="failed to get previous log" previous-index=8`,
		`time=4 level=WARN msg="failed to get previous log" previous-index=7`,
		`time=5 level=WARN msg="failed to get previous log" previous-index=6`,
		`time=6 level=INFO msg=ok a=1`,
		`time=7 level=INFO msg=ok a=2`,
		`--- start ---`,
	}
	want := []string{
		in[0], in[1], `        ... 2 more lines with msg="failed to get previous log" ...`, in[4],
		in[5], in[6], in[7],
	}
	if got := squeeze(in); !slices.Equal(got, want) {
		t.Errorf("squeeze =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
