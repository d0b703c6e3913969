package cache

import "testing"

// TestParseMax takes a share of the disk holding the folder.
func TestParseMax(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if n, err := ParseMax("25%", dir); err != nil || n <= 0 {
		t.Errorf("ParseMax(25%%) = %d, %v; want a share of the disk", n, err)
	}
	if n, err := ParseMax("20G", dir); err != nil || n != 20<<30 {
		t.Errorf("ParseMax(20G) = %d, %v; want %d", n, err, 20<<30)
	}
}
