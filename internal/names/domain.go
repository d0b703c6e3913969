package names

import (
	"fmt"
	"strings"
)

// Domain is a DNS host name in the canonical form corpus stores, routes
// and matches: ASCII, lowercase, without a trailing dot or spaces around
// it, of at least two labels (see ValidateDomain). ParseDomain makes one
// from what a user or a manifest gives.
type Domain string

func (d Domain) String() string { return string(d) }

// ParseDomain returns s as a Domain: normalised (NormalizeDomain), then
// validated (ValidateDomain). The error wraps ErrInvalid and names what
// is wrong.
func ParseDomain(s string) (Domain, error) {
	d := NormalizeDomain(s)
	if err := ValidateDomain(d); err != nil {
		return "", err
	}
	return Domain(d), nil
}

// NormalizeDomain returns host name s in canonical form: the spaces
// around it trimmed, one trailing dot (a fully qualified name's) dropped,
// letters lowercased. It validates nothing; non-ASCII names are left as
// they are (and refused by the validators: corpus takes IDNs in their
// xn-- form).
func NormalizeDomain(s string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), "."))
}

// ValidateDomain returns nil when d is a domain in canonical form: a
// host name (ValidateHost) of at least two labels. Wildcards are not
// accepted.
func ValidateDomain(d string) error {
	if why := hostProblem(d, 2); why != "" {
		return fmt.Errorf("%w: domain %q %s", ErrInvalid, d, why)
	}
	return nil
}

// ValidateHost returns nil when h is a host name in canonical form
// (lowercase, no trailing dot), of one label or more, each an RFC 1123
// label (ValidLabel), 253 characters at most: the names a route or a
// target may carry ("db" as well as "web.example.com").
func ValidateHost(h string) error {
	if why := hostProblem(h, 1); why != "" {
		return fmt.Errorf("%w: host name %q %s", ErrInvalid, h, why)
	}
	return nil
}

// ValidLabel says whether l is an RFC 1123 label: 1-63 lowercase
// letters, digits and '-', not starting or ending with '-' (digits may
// lead). Such a name stays in its folder as a path, too.
func ValidLabel(l string) bool { return labelProblem(l) == "" }

// hostProblem says what keeps h from being a host name of at least
// min labels in canonical form, or "" when nothing does.
func hostProblem(h string, min int) string {
	switch {
	case h == "":
		return "is empty"
	case len(h) > 253:
		return "is longer than 253 characters"
	case strings.Contains(h, "*"):
		return "is a wildcard; wildcards are not supported"
	case strings.HasSuffix(h, "."):
		return "has a trailing dot"
	case strings.ToLower(h) != h:
		return "must be lowercase"
	}
	labels := strings.Split(h, ".")
	if len(labels) < min {
		return fmt.Sprintf("needs at least %d labels (like web.example.com)", min)
	}
	for _, l := range labels {
		if why := labelProblem(l); why != "" {
			return why
		}
	}
	return ""
}

// labelProblem says what keeps l from being an RFC 1123 label, or "".
func labelProblem(l string) string {
	switch {
	case l == "":
		return "has an empty label"
	case len(l) > MaxLen:
		return fmt.Sprintf("has a label %.12q... longer than %d characters", l, MaxLen)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Sprintf("has a label %q starting or ending with a hyphen", l)
	}
	if _, r, bad := firstOutside([]rune(l), labelRune); bad {
		return fmt.Sprintf("has %s; use lowercase letters, digits, '-' and '.'", describeRune(r))
	}
	return ""
}
