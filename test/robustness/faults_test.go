package robustness

import (
	"math/rand/v2"
	"syscall"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
)

// A fault kind: what it does to the group, given the leader and a
// follower at the time, and what undoes it.
type faultKind struct {
	name string
	// inject breaks something; heal (after the hold) repairs it, as an
	// operator would (restart a dead process, free the disk).
	inject func(g *group, leader, follower int)
	heal   func(g *group, leader, follower int)
}

var faultKinds = []faultKind{
	{name: "kill -9 leader",
		inject: func(g *group, l, _ int) { g.reps[l].kill() },
		heal:   func(g *group, _, _ int) { g.restartDead() }},
	{name: "kill -9 follower",
		inject: func(g *group, _, f int) { g.reps[f].kill() },
		heal:   func(g *group, _, _ int) { g.restartDead() }},
	{name: "pause leader",
		inject: func(g *group, l, _ int) { g.reps[l].signal(syscall.SIGSTOP) },
		heal:   func(g *group, _, _ int) { g.restartDead() }},
	{name: "pause follower",
		inject: func(g *group, _, f int) { g.reps[f].signal(syscall.SIGSTOP) },
		heal:   func(g *group, _, _ int) { g.restartDead() }},
	// The leader alone on one side (a minority of one), the followers
	// together on the other.
	{name: "partition leader (minority)",
		inject: func(g *group, l, _ int) { g.lab.isolate(l) },
		heal:   func(g *group, _, _ int) { g.lab.heal() }},
	// A follower alone; the leader keeps its majority.
	{name: "partition follower (minority)",
		inject: func(g *group, _, f int) { g.lab.isolate(f) },
		heal:   func(g *group, _, _ int) { g.lab.heal() }},
	// The leader and one follower cannot see each other; the third sees
	// both (a bridge).
	{name: "bridge (leader-follower cut)",
		inject: func(g *group, l, f int) { g.lab.cut(l, f); g.lab.cut(f, l) },
		heal:   func(g *group, _, _ int) { g.lab.heal() }},
	// What the leader sends is lost; what it is sent arrives.
	{name: "one-way loss from leader",
		inject: func(g *group, l, _ int) {
			for i := range g.reps {
				if i != l {
					g.lab.cut(l, i)
				}
			}
		},
		heal: func(g *group, _, _ int) { g.lab.heal() }},
	// What the leader is sent is lost; what it sends arrives.
	{name: "one-way loss to leader",
		inject: func(g *group, l, _ int) {
			for i := range g.reps {
				if i != l {
					g.lab.cut(i, l)
				}
			}
		},
		heal: func(g *group, _, _ int) { g.lab.heal() }},
	// Through toxiproxy: what the leader sends its followers, and they
	// answer, on Raft and on API forwarding.
	{name: "latency 300±100 ms on the leader's links",
		inject: func(g *group, l, _ int) {
			g.lab.throughProxies(l, "latency", toxiclient.Attributes{"latency": 300, "jitter": 100})
		},
		heal: func(g *group, l, _ int) { g.lab.direct(l) }},
	{name: "leader's links slowed to 16 KB/s",
		inject: func(g *group, l, _ int) {
			g.lab.throughProxies(l, "bandwidth", toxiclient.Attributes{"rate": 16})
		},
		heal: func(g *group, l, _ int) { g.lab.direct(l) }},
	{name: "leader's connections reset",
		inject: func(g *group, l, _ int) {
			g.lab.throughProxies(l, "reset_peer", toxiclient.Attributes{"timeout": 0})
		},
		heal: func(g *group, l, _ int) { g.lab.direct(l) }},
	{name: "disk full leader",
		inject: func(g *group, l, _ int) { g.lab.fill(l) },
		heal:   func(g *group, l, _ int) { g.lab.unfill(l); g.restartDead() }},
	// Wall clocks stepped (heartbeat deadlines and Raft's timers run on
	// the monotonic clock; token expiry, certificate checks and the
	// entries' dates on the stepped one). Behind by less than the hour
	// certificates are backdated by; a day ahead moves the cluster's
	// time with the leader's, for the rest of the run.
	{name: "leader's clock a day ahead",
		inject: func(g *group, l, _ int) { g.stepClock(l, 24*time.Hour) },
		heal:   func(g *group, _, _ int) { g.resetClocks() }},
	{name: "leader's clock 45 min behind",
		inject: func(g *group, l, _ int) { g.stepClock(l, -45*time.Minute) },
		heal:   func(g *group, _, _ int) { g.resetClocks() }},
	{name: "follower's clock a day ahead",
		inject: func(g *group, _, f int) { g.stepClock(f, 24*time.Hour) },
		heal:   func(g *group, _, _ int) { g.resetClocks() }},
	{name: "follower's clock 45 min behind",
		inject: func(g *group, _, f int) { g.stepClock(f, -45*time.Minute) },
		heal:   func(g *group, _, _ int) { g.resetClocks() }},
	{name: "disk full follower",
		inject: func(g *group, _, f int) { g.lab.fill(f) },
		heal:   func(g *group, _, f int) { g.lab.unfill(f); g.restartDead() }},
}

// faultEvent is one fault of a run, as it happened.
type faultEvent struct {
	kind     string
	leader   string // the leader when it began ("" when there was none)
	at, held time.Duration
	// crashed names replicas that were not running when the fault was
	// healed, though the fault itself kills nothing (disk full).
	crashed []string
	// enospc counts the replicas' log lines that say "no space left on
	// device" while the fault held.
	enospc int
	// recovered is how long after the fault began the group first
	// acknowledged a write sent after it began (-1: not before heal + 10s).
	recovered time.Duration
}

// schedule is a run's faults: kinds, holds and gaps, from its seed.
type scheduled struct {
	kind faultKind
	hold time.Duration
	gap  time.Duration
}

func schedule(seed uint64, n int) []scheduled {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var s []scheduled
	for range n {
		s = append(s, scheduled{
			kind: faultKinds[rng.IntN(len(faultKinds))],
			hold: time.Duration(2000+rng.IntN(3000)) * time.Millisecond,
			gap:  time.Duration(1500+rng.IntN(1500)) * time.Millisecond,
		})
	}
	return s
}
