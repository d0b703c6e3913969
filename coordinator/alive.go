package coordinator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"corpus/internal/rpc"
)

// aliveLoop proves this replica alive to the service manager: each round
// it asks its own API for /healthz through its listener, which answers
// from the Raft state and the applied index, and beats cfg.Heart only
// when that answers. The first answer makes the replica ready; after
// that a round comes every Heart.Every (with no watchdog there is none).
func (s *Server) aliveLoop(ctx context.Context) {
	h := s.cfg.Heart
	if h == nil {
		return
	}
	url := rpc.BaseURL(s.APIAddr()) + "/healthz"
	ready := false
	for {
		wait := 100 * time.Millisecond
		if ready {
			wait = time.Second
		}
		if err := s.probe(ctx, url); err != nil {
			if ready {
				s.logger.Warn("this replica's API does not answer; withholding the watchdog ping", "error", err)
			}
		} else {
			h.Beat()
			if ready = true; h.Every() <= 0 {
				return
			}
			wait = h.Every()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// probe asks this replica's /healthz, within a second.
func (s *Server) probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := s.peerHTTP.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz answered %s", res.Status)
	}
	return nil
}
