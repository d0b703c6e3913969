package leader

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// probe is a loop that counts its runs and, once cancelled, returns only
// when the release channel of its run is closed.
type probe struct {
	mu      sync.Mutex
	running int
	starts  int
	release chan struct{}
}

func newProbe() *probe { return &probe{release: make(chan struct{})} }

func (p *probe) Run(ctx context.Context) {
	p.mu.Lock()
	p.running++
	p.starts++
	rel := p.release
	p.mu.Unlock()
	<-ctx.Done()
	<-rel
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
}

// let lets the loops cancelled so far return, and holds the next ones.
func (p *probe) let() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.release)
	p.release = make(chan struct{})
}

func (p *probe) counts() (running, starts int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, p.starts
}

func (p *probe) want(t *testing.T, when string, running, starts int) {
	t.Helper()
	if r, s := p.counts(); r != running || s != starts {
		t.Fatalf("%s: %d running of %d started, want %d of %d", when, r, s, running, starts)
	}
}

func TestRunnerFollowsLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newProbe(), newProbe()
		ctx, cancel := context.WithCancel(t.Context())
		changes := make(chan bool) // unbuffered: a send lands only when Run listens
		done := make(chan struct{})
		go func() {
			defer close(done)
			New(Config{Loops: []Loop{a, b}}).Run(ctx, false, changes)
		}()
		synctest.Wait()
		a.want(t, "following", 0, 0)

		changes <- true
		synctest.Wait()
		a.want(t, "leading", 1, 1)
		b.want(t, "leading", 1, 1)

		changes <- false
		synctest.Wait()
		// The loops saw their context end but have not returned: the
		// runner waits for them before it takes the next change.
		select {
		case changes <- true:
			t.Fatal("runner took a leadership change while the previous term's loops still ran")
		default:
		}
		a.want(t, "stopping", 1, 1)
		a.let()
		b.let()
		synctest.Wait()
		a.want(t, "lost", 0, 1)
		b.want(t, "lost", 0, 1)

		changes <- true
		synctest.Wait()
		a.want(t, "leading again", 1, 2)

		cancel()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Run returned while its loops still ran")
		default:
		}
		a.let()
		b.let()
		<-done
		a.want(t, "after Run", 0, 2)
		b.want(t, "after Run", 0, 2)
	})
}

func TestRunnerEstablishesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		calls := 0
		establish := func(ctx context.Context) error {
			calls++
			if calls < 3 {
				return errors.New("no barrier yet")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			New(Config{Establish: establish, Loops: []Loop{p}}).Run(ctx, true, nil)
		}()
		// Two retries a second apart: time in the bubble is fake, and
		// moves on while every goroutine waits.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if calls != 3 {
			t.Fatalf("Establish called %d times, want 3 (two failures retried)", calls)
		}
		p.want(t, "established", 1, 1)
		cancel()
		p.let()
		<-done
		p.want(t, "after Run", 0, 1)
	})
}

func TestRunnerLosingWhileEstablishing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		establish := func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}
		changes := make(chan bool)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			New(Config{Establish: establish, Loops: []Loop{p}}).Run(ctx, true, changes)
		}()
		synctest.Wait()
		changes <- false
		synctest.Wait()
		p.want(t, "lost before established", 0, 0)
		cancel()
		<-done
		p.want(t, "after Run", 0, 0)
	})
}
