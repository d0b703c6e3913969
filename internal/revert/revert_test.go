package revert

import (
	"slices"
	"testing"
)

func TestReverter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		success bool
		want    []int
	}{
		{name: "fail runs hooks newest first", success: false, want: []int{3, 2, 1}},
		{name: "success runs nothing", success: true, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var ran []int
			func() {
				r := New()
				defer r.Fail()
				for i := 1; i <= 3; i++ {
					r.Add(func() { ran = append(ran, i) })
				}
				r.Add(nil)
				if tt.success {
					r.Success()
				}
			}()
			if !slices.Equal(ran, tt.want) {
				t.Errorf("hooks ran %v, want %v", ran, tt.want)
			}
		})
	}
}

func TestFailRunsOnce(t *testing.T) {
	t.Parallel()
	n := 0
	r := New()
	r.Add(func() { n++ })
	r.Fail()
	r.Fail()
	if n != 1 {
		t.Errorf("hook ran %d times after two Fail calls, want 1", n)
	}
}

func TestCloneHandsUndoToCaller(t *testing.T) {
	t.Parallel()
	var ran []string
	build := func() func() {
		r := New()
		defer r.Fail()
		r.Add(func() { ran = append(ran, "bridge") })
		r.Add(func() { ran = append(ran, "veth") })
		undo := r.Clone().Fail
		r.Success()
		return undo
	}
	undo := build()
	if len(ran) != 0 {
		t.Fatalf("hooks ran %v before the caller asked, want none", ran)
	}
	undo()
	if want := []string{"veth", "bridge"}; !slices.Equal(ran, want) {
		t.Errorf("undo ran %v, want %v", ran, want)
	}
}

func TestCloneAfterSuccessIsEmpty(t *testing.T) {
	t.Parallel()
	r := New()
	r.Add(func() { t.Error("hook of a finished Reverter ran") })
	r.Success()
	r.Clone().Fail()
}
