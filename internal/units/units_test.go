package units

import (
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"256M", 256 << 20, true},
		{"256MiB", 256 << 20, true},
		{"1G", 1 << 30, true},
		{"1.5G", 3 << 29, true},
		{"512k", 512 << 10, true},
		{"1048576", 1 << 20, true},
		{"2TB", 2 << 40, true},
		{"", 0, false},
		{"M", 0, false},
		{"-1G", 0, false},
		{"12X", 0, false},
		{"1e400", 0, false},
		{"99999999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseCPUs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1000, true},
		{"0.5", 500, true},
		{"250m", 250, true},
		{"2", 2000, true},
		{"0", 0, false},
		{"-1", 0, false},
		{"abc", 0, false},
		{"0m", 0, false},
		{"NaN", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseCPUs(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseCPUs(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{512: "512B", 256 << 20: "256Mi", 3 << 29: "1.5Gi", 24 << 30: "24Gi"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{1000: "1", 250: "0.25", 2500: "2.5"} {
		if got := FormatCPUs(in); got != want {
			t.Errorf("FormatCPUs(%d) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"256M", "1.5G", "", "1e3K", "-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err == nil && v < 0 {
			t.Fatalf("ParseSize(%q) = %d, a negative size", s, v)
		}
	})
}

func FuzzParseCPUs(f *testing.F) {
	for _, s := range []string{"1", "0.5", "250m", "", "m", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseCPUs(s); err == nil && v <= 0 {
			t.Fatalf("ParseCPUs(%q) = %d, a non-positive amount", s, v)
		}
	})
}

func TestParseCPUsTiny(t *testing.T) {
	if v, err := ParseCPUs("0.0001"); err == nil {
		t.Errorf("ParseCPUs(0.0001) = %d, nil; want a refusal (below a millicore)", v)
	}
}
