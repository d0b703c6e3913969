package cache

import "testing"

// TestParseMax reads the cap's forms and refuses nonsense.
func TestParseMax(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"20G", 20 << 30, true}, {"512M", 512 << 20, true},
		{"0%", 0, false}, {"101%", 0, false}, {"lots", 0, false}, {"-1", 0, false},
	} {
		got, err := ParseMax(tc.in, dir)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseMax(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if n, err := ParseMax("25%", dir); err != nil || n <= 0 {
		t.Errorf("ParseMax(25%%) = %d, %v; want a share of the disk", n, err)
	}
}
