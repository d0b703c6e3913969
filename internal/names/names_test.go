package names

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"web", true},
		{"a", true},
		{"web-1", true},
		{"w3b", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"Web", false},
		{"1web", false},
		{"-web", false},
		{"web-", false},
		{"web_1", false},
		{"web.example", false},
		{"../etc", false},
		{"web/1", false},
		{"wéb", false},
		{"web 1", false},
		{"web\x00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate("guest", tt.name)
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%q) = %v, want ok=%v", tt.name, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate(%q) = %v, want an error wrapping ErrInvalid", tt.name, err)
			}
		})
	}
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{"web", "", "a-b", "A", "x.y", "../"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Validate("guest", s) != nil {
			return
		}
		if len(s) == 0 || len(s) > MaxLen || strings.ContainsAny(s, "./ _\x00") || strings.ToLower(s) != s {
			t.Fatalf("Validate(%q) accepted an invalid name", s)
		}
	})
}

func TestDebianPackage(t *testing.T) {
	t.Parallel()
	for s, ok := range map[string]bool{
		"python3": true, "libstdc++6": true, "postgresql-15": true, "g++": true, "python3.11": true, "0ad": true,
		"": false, "a": false, "-oAPT::x": false, "Python3": false, "python3 curl": false, "a;b": false,
		"+x": false, ".x": false, "x_y": false, strings.Repeat("a", 101): false,
	} {
		if DebianPackage(s) != ok {
			t.Errorf("DebianPackage(%q) = %v, want %v", s, !ok, ok)
		}
	}
}

// TestValidateSaysWhichCharacter: an error names the character as the
// user typed it and counts positions and lengths in characters, not in
// the bytes of their UTF-8 encoding.
func TestValidateSaysWhichCharacter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, want string }{
		{"grün", `has 'ü' at position 3`},
		{"web😀x", `has '😀' at position 4`},
		{"web\tx", `has '\t' (U+0009) at position 4`},
		{"web\xffx", `has '�' at position 4`},
		{"a" + strings.Repeat("é", 62), `has 'é' at position 2`},
		{"a" + strings.Repeat("é", 63), "is 64 characters long; the limit is 63"},
	} {
		err := Validate("guest", tt.name)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%q) = %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	if err := ValidateDomain("grün.example.test"); err == nil || !strings.Contains(err.Error(), `has 'ü'`) {
		t.Errorf(`ValidateDomain("grün.example.test") = %v, want an error naming 'ü'`, err)
	}
}
