// Package webcheck asks a web process over HTTP until it answers well:
// the deploy pipeline's check of a new web, and of a health URL.
package webcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"
)

// pause is the longest pause between two asks of a web process that
// does not answer yet.
const pause = 100 * time.Millisecond

// refusedPause is the pause between two asks while nothing listens.
const refusedPause = 10 * time.Millisecond

// ErrNoAnswer: a web process gave no good answer in time.
var ErrNoAnswer = errors.New("no good answer")

// Wait asks url until accept likes the status, or timeout; it returns
// the status accepted. Redirects are answers, not followed.
func Wait(ctx context.Context, url string, timeout time.Duration, accept func(int) bool) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	deadline := time.Now().Add(timeout)
	var last string
	// A process just started answers within milliseconds, or takes
	// seconds: ask again soon at first, then every pause at most. While
	// nothing listens yet (the connection refused, which costs the
	// process's guest nothing but its kernel's reset) ask every
	// refusedPause: a process held to a slice of a CPU starts listening
	// after tens of milliseconds, and a pause grown meanwhile would be
	// waited out after it.
	wait := refusedPause
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		res, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
			res.Body.Close()
			if accept(res.StatusCode) {
				return res.Status, nil
			}
			last = res.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("GET %s: %s (%w within %s)", url, last, ErrNoAnswer, timeout)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			time.Sleep(refusedPause)
			continue
		}
		time.Sleep(wait)
		wait = min(2*wait, pause)
	}
}
