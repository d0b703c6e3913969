// Package units reads and writes the sizes and CPU amounts people type:
// "256M", "1.5G", "0.5" cores, "250m".
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a byte size: a plain number of bytes, or a number with a
// binary unit K, M, G, T (also KiB, MiB, GiB, TiB, KB, MB, GB, TB — all
// powers of 1024, as memory limits are).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size %q is empty", s)
	}
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "IB"), "B")
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit; use a number with K, M, G or T (e.g. 256M)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("size %q is not a non-negative number", s)
	}
	v := f * float64(int64(1)<<sh)
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// ParseCPUs reads a CPU amount: cores ("1", "0.5") or millicores ("250m").
func ParseCPUs(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if m, ok := strings.CutSuffix(t, "m"); ok {
		v, err := strconv.ParseInt(m, 10, 64)
		if err != nil || v <= 0 {
			return 0, fmt.Errorf("cpus %q: millicores must be a positive integer (e.g. 250m)", s)
		}
		return v, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f <= 0 || f > 4096 || math.IsNaN(f) {
		return 0, fmt.Errorf("cpus %q: use a positive number of cores (e.g. 1 or 0.5) or millicores (250m)", s)
	}
	m := int64(math.Round(f * 1000))
	if m < 1 {
		return 0, fmt.Errorf("cpus %q is below one millicore", s)
	}
	return m, nil
}

// FormatSize prints bytes with a binary unit.
func FormatSize(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 3; n /= unit {
		div *= unit
		exp++
	}
	v := float64(b) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + string("KMGT"[exp]) + "i"
}

// FormatCPUs prints millicores as cores.
func FormatCPUs(m int64) string {
	return strings.TrimSuffix(strings.TrimRight(strconv.FormatFloat(float64(m)/1000, 'f', 3, 64), "0"), ".")
}
