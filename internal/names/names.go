// Package names validates the names users give to cluster objects. Guest,
// node and project names become DNS labels, container names and paths, so
// they are held to RFC 1123 label rules: 1–63 characters, lowercase letters,
// digits and '-', starting with a letter and not ending with '-'.
package names

import (
	"errors"
	"fmt"
	"unicode"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid name")

// MaxLen is the longest valid name.
const MaxLen = 63

// Validate returns nil when name is a valid object name, or an error
// wrapping ErrInvalid that says what is wrong, for a user to read:
// lengths and positions count characters, and a character is shown as
// itself ('ü'), not as the bytes of its encoding.
func Validate(kind, name string) error {
	runes := []rune(name)
	switch {
	case name == "":
		return fmt.Errorf("%w: %s name is empty", ErrInvalid, kind)
	case len(runes) > MaxLen:
		return fmt.Errorf("%w: %s name %q is %d characters long; the limit is %d", ErrInvalid, kind, name, len(runes), MaxLen)
	case runes[0] < 'a' || runes[0] > 'z':
		return fmt.Errorf("%w: %s name %q must start with a lowercase letter", ErrInvalid, kind, name)
	case runes[len(runes)-1] == '-':
		return fmt.Errorf("%w: %s name %q must not end with '-'", ErrInvalid, kind, name)
	}
	if i, r, bad := firstOutside(runes, labelRune); bad {
		return fmt.Errorf("%w: %s name %q has %s at position %d; use lowercase letters, digits and '-' (a DNS label)", ErrInvalid, kind, name, describeRune(r), i+1)
	}
	return nil
}

// labelRune says whether r may be in a DNS label.
func labelRune(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' }

// firstOutside returns the index (in characters) and the first rune of
// runes that ok refuses; bad is false when there is none.
func firstOutside(runes []rune, ok func(rune) bool) (i int, r rune, bad bool) {
	for i, r := range runes {
		if !ok(r) {
			return i, r, true
		}
	}
	return 0, 0, false
}

// describeRune shows r for an error message: quoted as itself when it
// prints ('ü'; '\uFFFD' for a byte that is not UTF-8), else with its
// code point as well.
func describeRune(r rune) string {
	if unicode.IsPrint(r) {
		return fmt.Sprintf("%q", r)
	}
	return fmt.Sprintf("%q (%U)", r, r)
}

// EnvVar reports whether k is a portable environment variable name:
// [A-Za-z_][A-Za-z0-9_]*.
func EnvVar(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Process says whether s is a process type name (a Procfile line's):
// [a-z][a-z0-9_-]*, up to 32 characters.
func Process(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || (i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-'))) {
			return false
		}
	}
	return true
}

// DebianPackage says whether s is a Debian package name (Debian policy
// 5.6.1): lowercase letters, digits, '+', '-' and '.', at least two
// characters, starting with a letter or digit, here at most 100. The
// start rule also keeps a name from reading as an option to apt.
func DebianPackage(s string) bool {
	if len(s) < 2 || len(s) > 100 {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '+' || c == '-' || c == '.'))) {
			return false
		}
	}
	return true
}
