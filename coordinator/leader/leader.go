// Package leader runs the coordinator's leader duties: loops that must
// run on the Raft leader alone (the scheduler, the liveness checker, the
// certificate orderer, the autoscaler, the backup schedules). A Runner
// watches this replica's leadership changes, the one place that does:
// on gaining leadership it establishes it (Establish, retried until it
// succeeds or leadership ends) and starts every loop; on losing it, or
// when its context ends, it cancels them and waits for each to return.
//
//	follower ──gained──▶ establishing ──ok──▶ leading (loops run)
//	   ▲                      │                    │
//	   └──────lost────────────┴────────lost────────┘ (loops cancelled, waited for)
package leader

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Loop is one leader duty: Run works until ctx ends, then returns.
type Loop interface {
	Run(ctx context.Context)
}

// Func makes a function a Loop.
type Func func(ctx context.Context)

// Run calls f.
func (f Func) Run(ctx context.Context) { f(ctx) }

// Config is what a Runner runs.
type Config struct {
	// Establish runs on gaining leadership before any loop starts (nil:
	// nothing to do): Nomad's establishLeadership. An error is logged
	// and Establish tried again after RetryEvery while leadership lasts.
	Establish  func(ctx context.Context) error
	RetryEvery time.Duration // 0: a second
	// Loops run while this replica leads, each in its own goroutine.
	Loops  []Loop
	Logger *slog.Logger
}

// Runner starts the loops while this replica leads. Make it with New.
type Runner struct {
	cfg Config
}

// New returns a runner of cfg's loops.
func New(cfg Config) *Runner {
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg}
}

// Run follows leadership until ctx ends: leading says whether this
// replica leads now, changes says when that changes (Raft's NotifyCh).
// Run returns once ctx ended and every loop it started has returned.
func (r *Runner) Run(ctx context.Context, leading bool, changes <-chan bool) {
	var (
		stop func()
		wg   sync.WaitGroup
	)
	step := func(leading bool) {
		if stop != nil {
			stop()
			wg.Wait()
			stop = nil
		}
		if !leading {
			return
		}
		lctx, cancel := context.WithCancel(ctx)
		stop = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.lead(lctx)
		}()
	}
	step(leading)
	for {
		select {
		case <-ctx.Done():
			step(false)
			return
		case leading := <-changes:
			r.cfg.Logger.Info("raft leadership changed", "leader", leading)
			step(leading)
		}
	}
}

// lead establishes leadership, then runs every loop until ctx ends.
func (r *Runner) lead(ctx context.Context) {
	for r.cfg.Establish != nil {
		err := r.cfg.Establish(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		r.cfg.Logger.Warn("starting leader duties", "error", err, "retry_in", r.cfg.RetryEvery)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.RetryEvery):
		}
	}
	var wg sync.WaitGroup
	for _, l := range r.cfg.Loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Run(ctx)
		}()
	}
	wg.Wait()
}
