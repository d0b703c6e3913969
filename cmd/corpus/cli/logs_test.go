package cli

import "testing"

// TestTermSafe: what a terminal acts on is written out, the rest kept.
func TestTermSafe(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, ünïcode, 日本":      "plain text, ünïcode, 日本",
		"tab\tkept":                    "tab\tkept",
		"\x1b[2J\x1b[Hcleared":         `\x1b[2J\x1b[Hcleared`,
		"\x1b]0;title\x07":             `\x1b]0;title\x07`,
		"back\rover\bwrite":            `back\x0dover\x08write`,
		"del\x7f":                      `del\x7f`,
		"c1 \u009b31m csi":             `c1 \x9b31m csi`,
		"8-bit \x9b31m csi, not UTF-8": `8-bit \x9b31m csi, not UTF-8`,
		"nul\x00":                      `nul\x00`,
	} {
		if got := termSafe(in); got != want {
			t.Errorf("termSafe(%q) = %q, want %q", in, got, want)
		}
	}
}
