package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/deploy/manifest"
	"corpus/drivers"
	"corpus/internal/failpoint"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The end of a deploy: its outcome recorded, a failure rolled back, the
// old processes retired, old releases pruned, the notify hook.

// finish records the outcome, rolls back or prunes, notifies, and
// returns the hook's exit status.
func (d *deploy) finish(err error) int {
	status := corpusv1.ReleaseSucceeded
	var se *stepError
	failedStep, msg := "", ""
	if err != nil {
		status = corpusv1.ReleaseFailed
		failedStep, msg = "pipeline", err.Error()
		if errors.As(err, &se) {
			failedStep, msg = se.step, se.err.Error()
		}
		tail := d.tail
		d.say("-----> %s failed: %s", failedStep, msg)
		d.dropStaging()
		d.rollback()
		d.notify(status)
		d.discard()
		d.say("-----> %s rejected: %s/%s still serves %s", d.what(), d.project, d.env.Name, d.serving())
		if len(tail) > 0 {
			d.say("       last output of %s:", failedStep)
			for _, l := range tail {
				d.say("       | %s", l)
			}
		}
	} else {
		d.notify(status)
		d.journal.Step = stepRecord
		if err := d.p.cache.SetDeploy(d.journal); err != nil {
			d.say("       journal: %v", err)
		}
		failpoint.Hit("deploy-" + stepRecord)
	}
	// The outcome must reach the coordinator; a short outage is waited out.
	var rerr error
	for i := 0; i < 10; i++ {
		_, rerr = coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.FinishReleaseResponse], error) {
			return c.FinishRelease(d.ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{
				Id: d.release.Id, Status: status, Steps: d.steps, FailedStep: failedStep, Message: msg, Log: d.log.String(),
			}))
		})
		if rerr == nil || connect.CodeOf(rerr) != connect.CodeUnavailable {
			break
		}
		time.Sleep(time.Second)
	}
	if rerr != nil && status == corpusv1.ReleaseSucceeded {
		// Unrecorded, a live release would be invisible to the cluster:
		// go back to the previous one and refuse the push.
		d.say("-----> recording the release failed (%v); rolling back", rerr)
		d.journal.Step = stepUnrecorded // a crash now rolls back too
		d.p.cache.SetDeploy(d.journal)
		d.restorePrevious()
		if d.gen != nil {
			d.gen.abort(context.WithoutCancel(d.ctx))
		}
		d.discard()
		d.p.cache.EndDeploy(d.journal)
		return 1
	}
	d.journal.Step = stepFinished
	d.p.cache.SetDeploy(d.journal)
	if status != corpusv1.ReleaseSucceeded {
		d.p.cache.EndDeploy(d.journal)
		return 1
	}
	if d.gen.settling() {
		// Every instance serves it; the old web waits out the moment
		// other nodes' proxies need to hear of the move. The caller
		// need not, nor does the environment: that, and pruning, happen
		// after it has its answer (retireLater, see endLock). The
		// journal, which is by environment, ends now.
		d.p.cache.EndDeploy(d.journal)
		d.say("-----> %s/%s %s is live (%.1fs); the processes before it stop once every node's proxy has moved", d.project, d.env.Name, d.name(), time.Since(d.journal.Started).Seconds())
		d.retireLater = true
		return 0
	}
	d.retire()
	d.prune()
	d.p.cache.EndDeploy(d.journal)
	d.say("-----> %s/%s %s is live (%.1fs)", d.project, d.env.Name, d.name(), time.Since(d.journal.Started).Seconds())
	return 0
}

func (d *deploy) serving() string {
	if d.prev == nil {
		return "nothing"
	}
	return corpusv1.ReleaseName(d.prev.Number)
}

// rollback is the failure procedure: current is put back (it only moved
// if the failure came after the switch) and the serving release's
// rollback hook runs with its archive.
func (d *deploy) rollback() {
	d.say("-----> rollback")
	if d.gen != nil {
		d.gen.abort(context.WithoutCancel(d.ctx))
	}
	d.restorePrevious()
	if d.prev == nil {
		return
	}
	pn := corpusv1.ReleaseName(d.prev.Number)
	if err := d.hook(d.dir()+"/releases/"+pn, "rollback", map[string]string{
		"CORPUS_ARCHIVE": d.dir() + "/archives/" + pn, "CORPUS_RELEASE": pn, "CORPUS_FAILED_RELEASE": d.name(),
	}); err != nil {
		d.say("       the rollback hook failed: %v", err)
	}
}

// restorePrevious makes sure current is what served before the deploy.
func (d *deploy) restorePrevious() {
	if err := restoreCurrent(d.ctx, d.driver, d.guest.Name, d.project, d.name(), d.prevNumber()); err != nil {
		d.say("       restoring current: %v", err)
	}
}

// restoreCurrent points current back at prev when it points at failed (a
// deploy interrupted after its switch); prev 0 removes it.
func restoreCurrent(ctx context.Context, drv drivers.Driver, guest, project, failed string, prev uint32) error {
	var out bytes.Buffer
	script := `set -e; cd "$1"; rm -rf current.new "releases/$2.tmp"; if [ "$(readlink current 2>/dev/null)" = "releases/$2" ]; then ` +
		`if [ "$3" = r0 ]; then rm -f current; else ln -s "releases/$3" current.new; mv -T current.new current; fi; fi`
	code, err := drv.Exec(ctx, guest, drivers.ExecRequest{
		Argv:   []string{"sh", "-c", script, "sh", projectDir(project), failed, corpusv1.ReleaseName(prev)},
		Stdout: &out, Stderr: &out,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(out.String()))
	}
	return err
}

func (d *deploy) notify(status string) {
	if status == corpusv1.ReleaseSucceeded {
		failpoint.Hit("deploy-notify")
	}
	d.say("-----> notify")
	start := time.Now()
	var err error
	if d.tree.Hooks["notify"] {
		err = d.exec(d.ctx, []string{"./" + manifest.Dir + "/notify"}, d.releaseDir(), d.stepEnv(map[string]string{"CORPUS_STATUS": status}), nil, true)
	} else if status == corpusv1.ReleaseSucceeded {
		d.say("       %s/%s %s (%s) deployed by %s", d.project, d.env.Name, d.name(), d.source(), d.release.Author)
	} else {
		d.say("       %s/%s %s (%s) by %s failed", d.project, d.env.Name, d.name(), d.source(), d.release.Author)
	}
	st := &corpusv1.ReleaseStep{Name: stepNotify, Status: corpusv1.StepOK, DurationMs: time.Since(start).Milliseconds()}
	if err != nil {
		// The release is decided; a notification that fails is reported,
		// not a reason to undo it.
		st.Status = corpusv1.StepFailed
		d.say("       warning: the notify hook failed: %v", err)
	}
	d.steps = append(d.steps, st)
}

// workFiles are what release name holds in its project's folder in the
// guest but its archive: its tree (and the one being unpacked), its
// environment and run spec.
func workFiles(name string) []string {
	return []string{"releases/" + name, "releases/" + name + ".tmp", ".env/" + name + ".json", ".env/" + name + ".run.json"}
}

// discard removes a failed release's files from the guest once its
// processes are stopped and current is back (a failed install may have
// filled the guest's disk); its record and log stay with the
// coordinator, and the archive of the release that serves stays.
func (d *deploy) discard() {
	if err := removeRelease(context.WithoutCancel(d.ctx), d.driver, d.guest.Name, d.project, d.name()); err != nil {
		d.say("       warning: removing the files of %s: %v", d.name(), err)
		return
	}
	d.say("       removed the files of %s", d.name())
}

// removeRelease removes release name's working files from project's
// folder in a guest, unless current points at it.
func removeRelease(ctx context.Context, drv drivers.Driver, guest, project, name string) error {
	var out bytes.Buffer
	script := `cd "$1" || exit 0; if [ "$(readlink current 2>/dev/null)" = "releases/$2" ]; then echo "current points at it" >&2; exit 1; fi; shift 2; rm -rf "$@"`
	code, err := drv.Exec(ctx, guest, drivers.ExecRequest{
		Argv:   append([]string{"sh", "-c", script, "sh", projectDir(project), name}, workFiles(name)...),
		Stdout: &out, Stderr: &out,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(out.String()))
	}
	return err
}

// prune removes the trees of releases beyond the newest keep. Failed
// releases do not count: their files went when they failed, and no
// rollback returns to them. An instance that staged the release prunes
// then, keeping the one it serves.
func (d *deploy) prune() {
	// The releases known when the push began, and this one: the lock
	// keeps any other deploy or rollback of the environment out meanwhile.
	rels := append([]*corpusv1.Release{d.release}, d.known...)
	sort.Slice(rels, func(i, j int) bool { return rels[i].Number > rels[j].Number })
	var drop []uint32
	var dirs []string
	held := 0 // releases with a tree, newest first
	for _, r := range rels {
		if r.Status == corpusv1.ReleaseFailed && r.Number != d.release.Number {
			continue
		}
		held++
		if held <= d.man.Keep || r.Pruned || r.Number == d.release.Number || r.Status == corpusv1.ReleaseDeploying {
			continue
		}
		if d.stage && r.Number == d.prevNumber() {
			continue // staged only: the release before serves on
		}
		drop = append(drop, r.Number)
		n := corpusv1.ReleaseName(r.Number)
		dirs = append(append(dirs, workFiles(n)...), "archives/"+n)
	}
	if len(drop) == 0 {
		return
	}
	if err := d.sh(`cd "$1"; shift; rm -rf "$@"`, append([]string{d.dir()}, dirs...)...); err != nil {
		d.say("       warning: pruning old releases: %v", err)
		return
	}
	if d.instance > 1 {
		return // the first instance records what is pruned
	}
	if _, err := coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.PruneReleasesResponse], error) {
		return c.PruneReleases(d.ctx, connect.NewRequest(&corpusv1.PruneReleasesRequest{Project: d.project, Env: d.env.Name, Numbers: drop}))
	}); err != nil {
		d.say("       warning: recording pruned releases: %v", err)
		return
	}
	sort.Slice(drop, func(i, j int) bool { return drop[i] < drop[j] })
	var names []string
	for _, n := range drop {
		names = append(names, corpusv1.ReleaseName(n))
	}
	d.say("       pruned %s (keep: %d)", strings.Join(names, ", "), d.man.Keep)
}

// retire stops the processes of the releases before, once the new ones
// serve: those of a project that no longer declares any, too.
func (d *deploy) retire() {
	standby := ""
	if d.strategy == strategyBlueGreen && d.prev != nil {
		// The release before stands by (tidy stops it once its time
		// is up); one that stood by until this release began goes now.
		standby = corpusv1.ReleaseName(d.prev.Number)
	}
	if d.gen != nil {
		d.gen.retireOthers(context.WithoutCancel(d.ctx), standby)
		return
	}
	if err := d.p.stopProcesses(context.WithoutCancel(d.ctx), d.driver, d.guest.Name, d.project); err != nil {
		d.say("       warning: stopping the processes of the releases before: %v", err)
	}
}

// what a failed deploy rejects: the push, or the release asked for.
func (d *deploy) what() string {
	if d.release != nil && d.release.Trigger != "" && d.release.Trigger != corpusv1.TriggerPush {
		return "Release"
	}
	return "Push"
}
