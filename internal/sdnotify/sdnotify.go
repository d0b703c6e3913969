// Package sdnotify tells the service manager that started a daemon how
// it is doing (the sd_notify protocol of systemd): READY=1 once it serves,
// STOPPING=1 when it shuts down, and WATCHDOG=1 while the loops that prove
// it alive keep going round.
//
// A daemon's proof of life is one or more Hearts, one per loop that must
// not stall: the loop wakes at least every Heart.Every and calls Beat each
// time round. The first beat of every Heart sends READY=1; after that,
// WATCHDOG=1 goes out each time every Heart has beaten again, so one stuck
// loop starves the watchdog and systemd restarts the daemon. Without
// NOTIFY_SOCKET (not started by systemd) nothing is sent and a nil Heart
// is valid and does nothing.
package sdnotify

import (
	"log/slog"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier speaks for one daemon process. Its methods are safe for
// concurrent use.
type Notifier struct {
	logger *slog.Logger
	every  time.Duration // half of WATCHDOG_USEC; 0: no watchdog

	mu     sync.Mutex
	hearts []*Heart
	ready  bool
}

// New returns the notifier of this process, reading NOTIFY_SOCKET and
// WATCHDOG_USEC (and WATCHDOG_PID) from the environment. Send failures
// are logged to logger, not returned: the daemon runs on without them.
func New(logger *slog.Logger) *Notifier {
	n := &Notifier{logger: logger.With("component", "sdnotify")}
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		n.logger.Warn("watchdog off: reading WATCHDOG_USEC", "error", err)
	}
	if d > 0 {
		n.every = d / 2
	}
	return n
}

// Heart registers one more loop the daemon's readiness and watchdog wait
// for. Register every Heart before any of them beats.
func (n *Notifier) Heart(name string) *Heart {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := &Heart{n: n, name: name}
	n.hearts = append(n.hearts, h)
	return h
}

// Stopping sends STOPPING=1: the daemon shuts down on purpose.
func (n *Notifier) Stopping() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.send(daemon.SdNotifyStopping)
}

func (n *Notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.logger.Warn("notifying the service manager", "state", state, "error", err)
	}
}

// beat records that h went round, and sends READY=1 or WATCHDOG=1 once
// every Heart has beaten.
func (n *Notifier) beat(h *Heart) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h.beaten = true
	for _, o := range n.hearts {
		if !o.beaten {
			return
		}
	}
	for _, o := range n.hearts {
		o.beaten = false
	}
	if !n.ready {
		n.ready = true
		n.send(daemon.SdNotifyReady)
		n.logger.Debug("ready")
		return
	}
	if n.every > 0 {
		n.send(daemon.SdNotifyWatchdog)
	}
}

// Heart is one loop's proof of life. A nil *Heart is valid: Every is 0
// and Beat does nothing.
type Heart struct {
	n      *Notifier
	name   string
	beaten bool // since the last READY or WATCHDOG; guarded by n.mu
}

// Every is the longest the loop may go without a beat (0: no bound, the
// loop need not wake for the watchdog).
func (h *Heart) Every() time.Duration {
	if h == nil {
		return 0
	}
	return h.n.every
}

// Beat says the loop went round: it is not stuck.
func (h *Heart) Beat() {
	if h != nil {
		h.n.beat(h)
	}
}

// Ticker returns a channel that fires every Every, for the loop to wake
// and beat while it has nothing else to do, and the function that stops
// it. With no watchdog the channel is nil and never fires.
func (h *Heart) Ticker() (<-chan time.Time, func()) {
	if h.Every() <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(h.Every())
	return t.C, t.Stop
}
