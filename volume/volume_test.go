package volume

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"data", true},
		{"db-1", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{"A", false},
		{"../x", false},
		{"a/b", false},
		{"..", false},
		{".hidden", false},
		{"-a", false},
		{"a-", false},
		{"1a", false},
		{"a.img", false},
		{strings.Repeat("a", 64), false},
	} {
		err := ValidateName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want it to wrap ErrInvalid", tc.name, err)
		}
	}
}

func TestNormalizeSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want int64
		ok       bool
	}{
		{-1, 0, false},
		{0, 0, false},
		{MinSize - 1, 0, false},
		{MinSize, MinSize, true},
		{MinSize + 1, MinSize + Align, true},
		{5 * GiB, 5 * GiB, true},
		{MaxSize, MaxSize, true},
		{MaxSize + 1, 0, false},
	} {
		got, err := NormalizeSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("NormalizeSize(%d) = %d, %v, want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("NormalizeSize(%d) = %v, want it to wrap ErrInvalid", tc.in, err)
		}
	}
}

// TestCheckSize: a backend takes the sizes NormalizeSize makes and
// refuses the others (it never rounds, so a volume is what was asked).
func TestCheckSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in int64
		ok bool
	}{
		{MinSize, true},
		{100003840, true},
		{100000000, false},
		{MinSize + 1, false},
		{MinSize - Align, false},
		{MaxSize, true},
		{MaxSize + Align, false},
	} {
		err := CheckSize(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("CheckSize(%d) = %v, want ok=%v", tc.in, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckSize(%d) = %v, want it to wrap ErrInvalid", tc.in, err)
		}
		if n, err := NormalizeSize(tc.in); err == nil && CheckSize(n) != nil {
			t.Errorf("CheckSize(NormalizeSize(%d)) = %v, want nil", tc.in, CheckSize(n))
		}
	}
}

func TestCheckShrink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		used, size  int64
		allowShrink bool
		ok          bool
	}{
		{"no opt-in", 0, GiB, false, false},
		{"small data, 64 MiB margin", 100 * MiB, 164 * MiB, true, true},
		{"small data, short of margin", 100 * MiB, 163 * MiB, true, false},
		{"big data, 10% margin", 10 * GiB, 11 * GiB, true, true},
		{"big data, short of 10%", 10 * GiB, 10*GiB + 500*MiB, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckShrink(tc.used, tc.size, tc.allowShrink)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckShrink(%d, %d, %v) = %v, want ok=%v", tc.used, tc.size, tc.allowShrink, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrCannotShrink) {
				t.Fatalf("CheckShrink = %v, want ErrCannotShrink", err)
			}
		})
	}
}
