// Package extensions is how coordinators call the operators' admission
// extensions: HTTPS endpoints that see a write before it is accepted.
// Mutating extensions run one after another in a declared order, each
// seeing the previous one's result; validating ones run in parallel on
// the final object; lint extensions see a git push before its deploy.
// Calls happen in the API handler, before anything is proposed to Raft,
// so a slow extension holds up only the write that waits for it.
//
// This package holds the rules (kinds, order, what a valid extension
// is), the caller (TLS, signatures, limits, timeouts, a circuit breaker
// per extension, metrics) and Verifier, for extension authors in Go.
package extensions

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// APIVersion names the payload's format.
const APIVersion = "corpus.dev/v1"

// minTimeout is the shortest timeout an extension may have.
const minTimeout = 10 * time.Millisecond

// Check says whether an extension is well formed, and fills its
// defaults (failure policy fail, timeout corpusv1.DefaultExtensionTimeout).
func Check(e *corpusv1.Extension) error {
	if err := names.Validate("extension", e.Name); err != nil {
		return err
	}
	u, err := url.Parse(e.Url)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("extension %s: url %q: want https://HOST[:PORT]/PATH (calls carry objects and signatures, never in clear)", e.Name, e.Url)
	}
	switch e.Kind {
	case corpusv1.ExtensionMutate, corpusv1.ExtensionValidate, corpusv1.ExtensionLint:
	default:
		return fmt.Errorf("extension %s: kind %q: want mutate, validate or lint", e.Name, e.Kind)
	}
	if len(e.On) == 0 {
		return fmt.Errorf("extension %s: say which writes it is called for (--on %s)", e.Name, strings.Join(corpusv1.ExtensionEvents, ","))
	}
	seen := map[string]bool{}
	for _, on := range e.On {
		if !slices.Contains(corpusv1.ExtensionEvents, on) {
			return fmt.Errorf("extension %s: --on %q: want some of %s", e.Name, on, strings.Join(corpusv1.ExtensionEvents, ", "))
		}
		if (on == corpusv1.OnDeploy) != (e.Kind == corpusv1.ExtensionLint) {
			return fmt.Errorf("extension %s: lint extensions are called for deploy (a push) alone, and deploy calls lint extensions alone", e.Name)
		}
		if seen[on] {
			return fmt.Errorf("extension %s: --on names %s twice", e.Name, on)
		}
		seen[on] = true
	}
	for _, other := range slices.Concat(e.After, e.Before) {
		if err := names.Validate("extension", other); err != nil {
			return fmt.Errorf("extension %s: after/before: %w", e.Name, err)
		}
		if other == e.Name {
			return fmt.Errorf("extension %s cannot run before or after itself", e.Name)
		}
	}
	if e.Kind == corpusv1.ExtensionValidate && (len(e.After) > 0 || len(e.Before) > 0) {
		return fmt.Errorf("extension %s: validating extensions run in parallel; after and before order mutating and lint ones", e.Name)
	}
	switch e.FailurePolicy {
	case "":
		e.FailurePolicy = corpusv1.FailurePolicyFail
	case corpusv1.FailurePolicyFail, corpusv1.FailurePolicyIgnore:
	default:
		return fmt.Errorf("extension %s: failure policy %q: want fail or ignore", e.Name, e.FailurePolicy)
	}
	switch t := time.Duration(e.TimeoutMs) * time.Millisecond; {
	case e.TimeoutMs == 0:
		e.TimeoutMs = corpusv1.DefaultExtensionTimeout.Milliseconds()
	case t < minTimeout || t > corpusv1.MaxExtensionTimeout:
		return fmt.Errorf("extension %s: timeout %s: between %s and %s", e.Name, t, minTimeout, corpusv1.MaxExtensionTimeout)
	}
	return nil
}

// For returns the enabled extensions of a kind called for event, in
// call order (see Order).
func For(all []*corpusv1.Extension, kind, event string) []*corpusv1.Extension {
	ordered, err := Order(all)
	if err != nil {
		// The state machine refuses cycles; order by priority alone
		// should one ever be there.
		ordered = slices.Clone(all)
		slices.SortStableFunc(ordered, tie)
	}
	var out []*corpusv1.Extension
	for _, e := range ordered {
		if !e.Disabled && e.Kind == kind && slices.Contains(e.On, event) {
			out = append(out, e)
		}
	}
	return out
}

// tie orders extensions the graph leaves free: higher priority first,
// then by name.
func tie(a, b *corpusv1.Extension) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// Order sorts extensions so that each runs after those it names in
// after and those that name it in before (names of extensions not there
// are ignored: they may come later); among those free to run next, the
// higher priority first, then the name. A cycle is an error that names
// it.
func Order(all []*corpusv1.Extension) ([]*corpusv1.Extension, error) {
	byName := map[string]*corpusv1.Extension{}
	for _, e := range all {
		byName[e.Name] = e
	}
	// edges[a] are the extensions that must run after a.
	edges := map[string][]string{}
	indeg := map[string]int{}
	edge := func(first, then string) {
		if byName[first] == nil || byName[then] == nil || slices.Contains(edges[first], then) {
			return
		}
		edges[first] = append(edges[first], then)
		indeg[then]++
	}
	for _, e := range all {
		for _, a := range e.After {
			edge(a, e.Name)
		}
		for _, b := range e.Before {
			edge(e.Name, b)
		}
	}
	var ready, out []*corpusv1.Extension
	for _, e := range all {
		if indeg[e.Name] == 0 {
			ready = append(ready, e)
		}
	}
	for len(ready) > 0 {
		slices.SortFunc(ready, tie)
		next := ready[0]
		ready = ready[1:]
		out = append(out, next)
		for _, then := range edges[next.Name] {
			if indeg[then]--; indeg[then] == 0 {
				ready = append(ready, byName[then])
			}
		}
	}
	if len(out) < len(all) {
		return nil, fmt.Errorf("the extensions' order has a cycle: %s", cycle(edges, indeg))
	}
	return out, nil
}

// cycle names one cycle among the extensions Order could not place
// (those with indeg > 0 left), as "a -> b -> a".
func cycle(edges map[string][]string, indeg map[string]int) string {
	var start string
	for n, d := range indeg {
		if d > 0 && (start == "" || n < start) {
			start = n
		}
	}
	// Walk back along unplaced edges until a name repeats.
	preds := map[string][]string{}
	for from, tos := range edges {
		for _, to := range tos {
			if indeg[from] > 0 {
				preds[to] = append(preds[to], from)
			}
		}
	}
	seen := map[string]int{}
	var path []string
	for n := start; ; {
		if i, ok := seen[n]; ok {
			loop := slices.Clone(path[i:])
			slices.Reverse(loop)
			// From its first name in order, so the same cycle reads the
			// same way however it was found.
			m := slices.Index(loop, slices.Min(loop))
			loop = append(loop[m:], loop[:m]...)
			return strings.Join(append(loop, loop[0]), " -> ")
		}
		seen[n] = len(path)
		path = append(path, n)
		p := preds[n]
		slices.Sort(p)
		if len(p) == 0 {
			return strings.Join(path, ", ")
		}
		n = p[0]
	}
}
