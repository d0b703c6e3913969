// Package names validates the names users give to cluster objects. Guest,
// node and project names become DNS labels, container names and paths, so
// they are held to RFC 1123 label rules: 1–63 characters, lowercase letters,
// digits and '-', starting with a letter and not ending with '-'.
package names

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid name")

// MaxLen is the longest valid name.
const MaxLen = 63

// Validate returns nil when name is a valid object name, or an error
// wrapping ErrInvalid that says what is wrong, for a user to read.
func Validate(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s name is empty", ErrInvalid, kind)
	case len(name) > MaxLen:
		return fmt.Errorf("%w: %s name %q is %d characters long; the limit is %d", ErrInvalid, kind, name, len(name), MaxLen)
	case name[0] < 'a' || name[0] > 'z':
		return fmt.Errorf("%w: %s name %q must start with a lowercase letter", ErrInvalid, kind, name)
	case name[len(name)-1] == '-':
		return fmt.Errorf("%w: %s name %q must not end with '-'", ErrInvalid, kind, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' {
			continue
		}
		return fmt.Errorf("%w: %s name %q has %q at position %d; use lowercase letters, digits and '-' (a DNS label)", ErrInvalid, kind, name, c, i+1)
	}
	return nil
}

// ValidateDomain returns nil when d is a lowercase DNS host name of at
// least two labels, each an RFC 1123 label (digits may lead), 253
// characters at most. Wildcards are not accepted.
func ValidateDomain(d string) error {
	if d == "" {
		return fmt.Errorf("%w: domain is empty", ErrInvalid)
	}
	if len(d) > 253 {
		return fmt.Errorf("%w: domain %q is longer than 253 characters", ErrInvalid, d)
	}
	labels := strings.Split(d, ".")
	if len(labels) < 2 {
		return fmt.Errorf("%w: domain %q needs at least two labels (like web.example.com)", ErrInvalid, d)
	}
	for _, l := range labels {
		if l == "" || len(l) > MaxLen || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%w: domain %q has an invalid label %q", ErrInvalid, d, l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%w: domain %q has %q; use lowercase letters, digits, '-' and '.'", ErrInvalid, d, c)
			}
		}
	}
	return nil
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
