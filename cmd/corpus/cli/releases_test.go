package cli

import (
	"testing"
	"time"

	corpusv1 "corpus/proto/corpus/v1"
)

func TestParseRelease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"r3", 3, true},
		{"3", 3, true},
		{"R12", 12, true},
		{" r7 ", 7, true},
		{"r4294967295", 4294967295, true},
		{"r0", 0, false},
		{"0", 0, false},
		{"", 0, false},
		{"r", 0, false},
		{"rr3", 0, false},
		{"r-1", 0, false},
		{"r+1", 0, false},
		{"3r", 0, false},
		{"r4294967296", 0, false},
		{"latest", 0, false},
	} {
		t.Run(c.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseRelease(c.in)
			if (err == nil) != c.ok || got != c.want {
				t.Errorf("parseRelease(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
			}
		})
	}
}

func FuzzParseRelease(f *testing.F) {
	for _, s := range []string{"r3", "3", "", "r", "r0", "R99", "r-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseRelease(s)
		if err != nil {
			return
		}
		if n == 0 {
			t.Fatalf("parseRelease(%q) = 0 without an error", s)
		}
		if back, err := parseRelease(corpusv1.ReleaseName(n)); err != nil || back != n {
			t.Fatalf("parseRelease(ReleaseName(%d)) = %d, %v; want %d", n, back, err, n)
		}
	})
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{42 * time.Millisecond, "42ms"},
		{1234 * time.Millisecond, "1.2s"},
		{61*time.Second + 600*time.Millisecond, "1m2s"},
	} {
		if got := formatDuration(c.in); got != c.want {
			t.Errorf("formatDuration(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
