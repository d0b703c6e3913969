package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDeployRandomKills: the agent is killed -9 at a random moment of a
// git push deploy, run after run, not at one chosen step each (that is
// TestDeployCrash). After a restart exactly one whole release serves,
// the previous one or the new one, and the release list, the remote's
// main, the guest's current link and the page agree on which; nothing
// half-made is left in the guest. CORPUS_DEPLOY_KILLS sets the number of
// runs (12); the seed is printed, and CORPUS_DEPLOY_KILL_SEED replays its
// kill times.
func TestDeployRandomKills(t *testing.T) {
	runs := 12
	if n, err := strconv.Atoi(os.Getenv("CORPUS_DEPLOY_KILLS")); err == nil && n > 0 {
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("CORPUS_DEPLOY_KILL_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (CORPUS_DEPLOY_KILL_SEED=%d replays the kill times)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	l := newDeployLab(t)
	l.commitSite("v0")
	start := time.Now()
	l.mustPush()
	took := time.Since(start)
	l.wantPage("version v0 (r1)")
	args := l.a.proc.args
	serving, servingPage := 1, "version v0 (r1)"
	outcomes := map[string]int{}
	gitUp := func() {
		eventually(t, 30*time.Second, "git endpoint up", func() error {
			_, err := l.gitAs("alice", "ls-remote", "corpus")
			return err
		})
	}
	for i := 1; i <= runs; i++ {
		name := fmt.Sprintf("v%d", i)
		commit := l.commitSite(name)
		before := l.remoteHead()
		_, rels := l.releases()
		newest := 0
		if len(rels) > 0 {
			newest = rels[0].Number
		}
		// Up to a little more than a whole deploy: some kills land after
		// it ended.
		delay := time.Duration(rng.Int64N(int64(took) * 5 / 4))
		pushed := make(chan error, 1)
		go func() { _, err := l.push(); pushed <- err }()
		time.Sleep(delay)
		l.a.kill()
		pushErr := <-pushed
		l.a.proc = startIn(t, l.a.node.ns, "agent n1", nil, args...)
		gitUp()

		// Settled: no release deploying, including one whose recording
		// was in flight when the agent died.
		var last releaseView
		eventually(t, time.Minute, "the interrupted deploy resolved", func() error {
			_, rels := l.releases()
			for _, r := range rels {
				if r.Status == "deploying" {
					return fmt.Errorf("r%d is still deploying", r.Number)
				}
			}
			last = releaseView{} // the push was cut before a release was recorded
			if len(rels) > 0 && rels[0].Number > newest {
				last = rels[0]
			}
			return nil
		})
		cur, _ := l.releases()
		outcome := "no release recorded"
		switch {
		case last.Number == 0:
			if cur != serving {
				t.Errorf("run %d (kill after %s): no new release, yet r%d is current, not r%d", i, delay, cur, serving)
			}
		case last.Status == "succeeded":
			outcome = "new release serves"
			if cur != last.Number {
				t.Errorf("run %d (kill after %s): r%d succeeded, yet r%d is current", i, delay, last.Number, cur)
			}
			serving, servingPage = last.Number, fmt.Sprintf("version %s (r%d)", name, last.Number)
		case last.Status == "failed":
			outcome = "previous release serves"
			if cur != serving {
				t.Errorf("run %d (kill after %s): r%d failed, yet r%d is current, not r%d", i, delay, last.Number, cur, serving)
			}
		default:
			t.Errorf("run %d (kill after %s): r%d is %q", i, delay, last.Number, last.Status)
		}
		outcomes[outcome]++
		if pushErr == nil && serving != last.Number {
			t.Errorf("run %d (kill after %s): the push succeeded but r%d serves", i, delay, serving)
		}
		l.wantPage(servingPage)
		// The remote's main moves when git takes the push, after the
		// deploy recorded its success: an agent killed in between leaves
		// the new release serving, its push failed for the client and the
		// branch where it was (the next push deploys the commit again).
		// Otherwise the branch says which release serves.
		h := l.remoteHead()
		switch {
		case serving != last.Number || last.Number == 0:
			if h != before {
				t.Errorf("run %d (kill after %s): the remote's main moved to %s, yet the new release does not serve", i, delay, h)
			}
		case pushErr == nil && h != commit, h != commit && h != before:
			t.Errorf("run %d (kill after %s): the remote's main is %s, want %s (r%d serves)", i, delay, h, commit, serving)
		}
		if got := l.guestSh("cd /srv/projects/hello; readlink current; ls -a | grep -c -e current.new -e '.tmp' || true; ls releases | grep -c tmp || true"); got != fmt.Sprintf("releases/r%d\n0\n0", serving) {
			t.Errorf("run %d (kill after %s): current, leftovers = %q, want r%d and none", i, delay, got, serving)
		}
		t.Logf("run %d: killed %s into the deploy: %s (r%d)", i, delay.Round(time.Millisecond), outcome, serving)
	}
	t.Logf("%d kills during deploys of %s each: %v", runs, took.Round(100*time.Millisecond), outcomes)
	// A deploy works afterwards.
	l.commitSite("after")
	l.mustPush()
	if _, rels := l.releases(); !strings.HasPrefix(l.page(), "200 version after (r") || len(rels) == 0 || rels[0].Status != "succeeded" {
		t.Errorf("the deploy after the kills: page %q", l.page())
	}
}
