package proxy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"corpus/internal/names"
)

// Routes is the whole routing table of a proxy. It is plain data: the agent
// builds it from the desired state of the guests on its node and hands it to
// [Proxy.SetRoutes], which replaces the previous table as a whole.
type Routes struct {
	// HTTP maps a host name (lowercase, no port) to its route. It serves
	// both the HTTP and the HTTPS listener.
	HTTP map[string]HTTPRoute `json:"http,omitempty"`
	// TCP maps a listen port on the node to its route.
	TCP map[int]TCPRoute `json:"tcp,omitempty"`
	// TLS maps a domain to the certificate HTTPS serves for it (see
	// TLSDomain); keys are never written to disk (WithoutKeys).
	TLS map[string]TLSDomain `json:"tls,omitempty"`
	// Challenges maps the token of an ACME http-01 challenge to its key
	// authorization, answered on /.well-known/acme-challenge/TOKEN.
	Challenges map[string]string `json:"challenges,omitempty"`
}

// HTTPRoute sends the requests of one host to its targets.
type HTTPRoute struct {
	// Targets are host:port addresses that speak plain HTTP/1.1. Requests
	// go to them in turn (round-robin); a request without a body whose
	// method is idempotent moves on to the next target when one cannot be
	// connected to.
	Targets []string `json:"targets"`
	// HTTPS marks a route whose domain has (or awaits) a certificate in
	// Routes.TLS; RedirectHTTPS then redirects plain HTTP to HTTPS once
	// the certificate serves, and HSTS adds Strict-Transport-Security.
	HTTPS         bool `json:"https,omitempty"`
	RedirectHTTPS bool `json:"redirect_https,omitempty"`
	HSTS          bool `json:"hsts,omitempty"`
}

// TCPRoute sends the connections of one listen port to its target.
type TCPRoute struct {
	// Target is the host:port connections are forwarded to.
	Target string `json:"target"`
}

// Validate reports every problem of r, joined, in a stable order: each
// wraps ErrInvalidHost, ErrNoTargets, ErrInvalidTarget or ErrInvalidPort.
// A nil error means SetRoutes accepts r.
func (r Routes) Validate() error {
	var errs []error
	for _, host := range slices.Sorted(maps.Keys(r.HTTP)) {
		if err := validHost(host); err != nil {
			errs = append(errs, fmt.Errorf("http route %q: %w", host, err))
		}
		route := r.HTTP[host]
		if len(route.Targets) == 0 {
			errs = append(errs, fmt.Errorf("http route %q: %w", host, ErrNoTargets))
		}
		for _, t := range route.Targets {
			if err := validTarget(t); err != nil {
				errs = append(errs, fmt.Errorf("http route %q: %w", host, err))
			}
		}
	}
	for _, port := range slices.Sorted(maps.Keys(r.TCP)) {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Errorf("tcp route %d: %w: must be in 1-65535", port, ErrInvalidPort))
		}
		if err := validTarget(r.TCP[port].Target); err != nil {
			errs = append(errs, fmt.Errorf("tcp route %d: %w", port, err))
		}
	}
	errs = append(errs, r.validTLS()...)
	return errors.Join(errs...)
}

// clone returns a deep copy of r, so that neither the caller nor the proxy
// can change the other's table.
func (r Routes) clone() Routes {
	out := Routes{}
	if r.HTTP != nil {
		out.HTTP = make(map[string]HTTPRoute, len(r.HTTP))
		for h, route := range r.HTTP {
			route.Targets = slices.Clone(route.Targets)
			out.HTTP[h] = route
		}
	}
	if r.TCP != nil {
		out.TCP = maps.Clone(r.TCP)
	}
	out.TLS = maps.Clone(r.TLS) // values hold strings and a slice never written to
	out.Challenges = maps.Clone(r.Challenges)
	return out
}

// validHost checks a host name in the canonical form the proxy matches
// against (names.ValidateHost): lowercase, no trailing dot, no port, no
// wildcard; one label or more.
func validHost(h string) error {
	if err := names.ValidateHost(h); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidHost, err)
	}
	return nil
}

// validTarget checks a host:port target: an IP address or a host name, and
// a numeric port in 1-65535.
func validTarget(t string) error {
	host, port, err := net.SplitHostPort(t)
	if err != nil {
		return fmt.Errorf("%w %q: not host:port", ErrInvalidTarget, t)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
		return fmt.Errorf("%w %q: port must be a number in 1-65535", ErrInvalidTarget, t)
	}
	if host == "" {
		return fmt.Errorf("%w %q: empty host", ErrInvalidTarget, t)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if err := validHost(strings.ToLower(host)); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidTarget, t, err)
	}
	return nil
}

// matchHost turns a Host header (or TLS server name) into the key routes are
// stored under: the port dropped, then normalised (names.NormalizeDomain).
// It never fails; a malformed host simply matches no route.
func matchHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if strings.HasPrefix(h, "[") {
			// [v6]:port or [v6]
			if j := strings.LastIndexByte(h, ']'); j >= 0 {
				h = h[1:j]
			}
		} else if strings.IndexByte(h, ':') == i {
			// host:port; a bare IPv6 literal (several colons) is kept.
			h = h[:i]
		}
	}
	return names.NormalizeDomain(h)
}
