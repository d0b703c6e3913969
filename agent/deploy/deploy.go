package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/cache"
	"corpus/agent/deploy/githook"
	"corpus/agent/deploy/imagetree"
	"corpus/agent/deploy/manifest"
	"corpus/agent/deploy/srctree"
	"corpus/agent/deploy/webcheck"
	"corpus/drivers"
	"corpus/internal/failpoint"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Pipeline step names, as output and recorded.
const (
	stepArchive     = "archive"
	stepReleaseSync = "release-sync"
	stepInstall     = "install"
	stepHealth      = "health"
	stepFixperms    = "fixperms"
	stepStart       = "start"
	stepSwitch      = "switch"
	stepRoll        = "roll"
	stepStage       = "stage"
	stepNotify      = "notify"
	// stepBegin is journalled before the release is recorded.
	stepBegin = "begin"
	// stepRecord is journalled once every step passed, before the success
	// is recorded: from there on the new release stays.
	stepRecord = "record"
	// stepUnrecorded is journalled when the success could not be
	// recorded: the deploy is being undone, and recovery undoes it as it
	// does one stopped before record.
	stepUnrecorded = "unrecorded"
	// stepFinished is journalled once the outcome is recorded.
	stepFinished = "finished"
)

const (
	// maxLogBytes bounds the deploy output an agent keeps to record.
	maxLogBytes = 256 << 10
	// tailLines of a failed step are repeated in the rejection.
	tailLines = 10
)

// projectDir is a project's folder inside its guest.
// ProjectsRoot is the folder of the project trees in a guest.
const ProjectsRoot = "/srv/projects"

func projectDir(project string) string { return ProjectsRoot + "/" + project }

// deploy is one run of the pipeline.
type deploy struct {
	p       *Pipeline
	ctx     context.Context
	guest   *corpusv1.Guest
	driver  drivers.Driver
	project string
	env     *corpusv1.ProjectEnv
	release *corpusv1.Release
	prev    *corpusv1.Release // the serving release, nil on the first deploy
	known   []*corpusv1.Release
	tree    *srctree.Tree
	man     *manifest.Manifest
	// image is the release's image when it is made from one (its tree
	// instead of a pushed one); imageRef and imageDigest are what the
	// release records.
	image       *imagetree.Source
	imageRef    string
	imageDigest string
	uid         int
	gid         int
	journal     cache.Deploy
	// config is the release's config, opened: it reaches the guest and
	// nowhere else (not the log, not the journal).
	config map[string]string
	// only names the steps to run (corpus deploy --only); empty runs all.
	only []string
	// gen is the release's processes, started beside the old ones.
	gen *rollout
	// staging is the other instances staging the release while this
	// one builds it (a rolling deploy's first instance), nil otherwise.
	staging *staging
	// retireLater: the end of a deploy that succeeded (its old
	// processes retired, old releases pruned) is left for after the
	// caller's answer (see finish, endLock).
	retireLater bool
	// instance is the environment's instance deployed (0: the first,
	// which records the release and rolls the others).
	instance uint32
	// stage (an instance's part of a blue-green deploy) ends the run once
	// the release's web answers: nothing switches. strategy is the
	// deploy's ("blue-green", or rolling), keepFor how long a blue-green
	// one keeps the release before standing by (seconds, 0: the default).
	stage    bool
	strategy string
	keepFor  int64

	sayMu sync.Mutex    // the instances' goroutines say too
	out   io.Writer     // to the git client
	log   *bytes.Buffer // everything said, to record
	steps []*corpusv1.ReleaseStep
	tail  []string // the current step's last output lines
}

// push runs the pipeline for a push, under ctx, and returns the hook's
// exit status: 0 accepts the push, anything else rejects it.
func (p *Pipeline) push(ctx context.Context, sess *pushSession, req *githook.Request, out io.Writer) int {
	env := sess.access.Env
	start := time.Now()
	reject := func(format string, args ...any) int {
		fmt.Fprintf(out, "corpus: push rejected: "+format+"\n", args...)
		p.metrics.deployed(sess.project, "rejected", time.Since(start))
		return 1
	}
	branchRef := "refs/heads/" + env.Branch
	var upd *githook.RefUpdate
	for i, u := range req.Updates {
		if u.Ref != branchRef {
			return reject("only %s deploys to %s/%s (git push corpus %s); %s is not accepted", env.Branch, sess.project, env.Name, env.Branch, u.Ref)
		}
		upd = &req.Updates[i]
	}
	if upd == nil {
		return reject("nothing to deploy")
	}
	if upd.New == githook.ZeroID {
		return reject("deleting %s would leave %s/%s without source; it is not allowed", env.Branch, sess.project, env.Name)
	}
	key := sess.project + "/" + env.Name
	if holder, ok := p.envLocks.Lock(ctx, key, fmt.Sprintf("a push by %s since %s", sess.user, time.Now().Format(time.TimeOnly))); !ok {
		return reject("another deploy of %s is running (%s); push again when it ends", key, holder)
	}
	var d *deploy
	defer func() { p.endLock(key, d) }()

	repo := filepath.Join(p.git.root, sess.project+"-"+env.Name+".git")
	g := quarantineGit{repo: repo, req: req}
	t, man, subject, err := inspectPush(g, upd.New, p.maxPushBytes*4)
	if err != nil {
		return reject("%v", err)
	}
	p.sources.set(key, g)
	defer p.sources.drop(key)
	d = &deploy{p: p, ctx: ctx, project: sess.project, env: env, tree: t, man: man, out: out, log: &bytes.Buffer{}}
	d.strategy, d.keepFor = man.Strategy("", 0)
	if d.guest, d.driver, err = p.guestForExec(env.GuestName); err != nil {
		return reject("%v", err)
	}
	d.known = sess.access.Releases
	for _, r := range sess.access.Releases {
		if r.Number == env.CurrentRelease && r.Status == corpusv1.ReleaseSucceeded {
			d.prev = r
		}
	}
	if err := d.resolveUser(); err != nil {
		return reject("%v", err)
	}
	if refused, err := d.lint(g, upd.Old, upd.New, sess.user, subject); err != nil {
		return reject("asking the lint extensions: %v", err)
	} else if refused != "" {
		return reject("%v", errLintRefused(refused))
	}
	if err := d.begin(upd.New, sess.user, subject, corpusv1.TriggerPush); err != nil {
		return reject("recording the release: %v", err)
	}
	d.say("-----> Deploying %s/%s %s (%s by %s)", sess.project, env.Name, d.name(), short(upd.New), sess.user)
	err = d.run(g, upd.New)
	code := d.finish(err)
	outcome := "succeeded"
	if code != 0 {
		outcome = "failed"
	}
	p.metrics.deployed(sess.project, outcome, time.Since(start))
	return code
}

// begin records the release and takes its config. The journal names
// the release before the coordinators hear of it (the agent picks its
// id), so an agent killed while asking finds it on restart and settles
// it, instead of leaving a release "deploying" that nothing ends.
func (d *deploy) begin(commit, author, subject, trigger string) error {
	d.journal = cache.Deploy{
		Kind: "deploy", Project: d.project, Env: d.env.Name, Guest: d.guest.Name,
		ReleaseID: secret.Hex(8), Step: stepBegin, Previous: d.prevNumber(), Started: time.Now(),
	}
	if err := d.p.cache.SetDeploy(d.journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	failpoint.Hit("deploy-" + stepBegin)
	rel, err := coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.BeginReleaseResponse], error) {
		return c.BeginRelease(d.ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{
			Project: d.project, Env: d.env.Name, Commit: commit, Author: author, Subject: subject,
			Trigger: trigger, Processes: d.man.ProcessOrder(), ReleaseId: d.journal.ReleaseID,
			Image: d.imageRef, ImageDigest: d.imageDigest,
		}))
	})
	if err != nil {
		// It may have been recorded all the same (the answer lost):
		// settle it now, or on restart if that fails too.
		if ferr := d.p.failRelease(d.ctx, d.journal, "the agent could not begin the deploy: "+err.Error()); ferr == nil {
			d.p.cache.EndDeploy(d.journal)
		}
		return err
	}
	d.release, d.config = rel.Release, rel.Config
	d.journal.Number = d.release.Number
	if len(d.release.ConfigChanges) > 0 {
		d.say("       config changes: %s", strings.Join(d.release.ConfigChanges, " "))
	}
	return nil
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

func (d *deploy) name() string { return corpusv1.ReleaseName(d.release.Number) }

func (d *deploy) prevNumber() uint32 {
	if d.prev == nil {
		return 0
	}
	return d.prev.Number
}

// quarantineGit runs git on a push's objects before git accepts them.
type quarantineGit struct {
	repo string
	req  *githook.Request
}

func (q quarantineGit) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "tar.umask=022", "--git-dir", q.repo}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent"}
	if q.req.ObjectDir != "" {
		cmd.Env = append(cmd.Env, "GIT_OBJECT_DIRECTORY="+q.req.ObjectDir)
	}
	if q.req.AlternateDirs != "" {
		cmd.Env = append(cmd.Env, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+q.req.AlternateDirs)
	}
	if q.req.Quarantine != "" {
		cmd.Env = append(cmd.Env, "GIT_QUARANTINE_PATH="+q.req.Quarantine)
	}
	return cmd
}

func (q quarantineGit) output(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := q.cmd(ctx, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// inspectPush checks a pushed commit against the project contract before
// anything happens, so a bad push changes nothing.
func inspectPush(g quarantineGit, commit string, maxBytes int64) (*srctree.Tree, *manifest.Manifest, string, error) {
	// --no-walk: an instance's repository holds the commit and its tree,
	// not its parents (a push refused before it never reached it), and
	// log -1 reads the parents all the same.
	subject, err := g.output("log", "--no-walk", "--format=%s", commit)
	if err != nil {
		return nil, nil, "", err
	}
	raw, err := g.output("ls-tree", "-r", "-l", "-z", "--full-tree", commit)
	if err != nil {
		return nil, nil, "", err
	}
	var entries []srctree.Entry
	for _, rec := range bytes.Split(raw, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		meta, p, ok := strings.Cut(string(rec), "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 {
			return nil, nil, "", fmt.Errorf("unexpected ls-tree output %q", rec)
		}
		e := srctree.Entry{Mode: f[0], Type: f[1], Path: p}
		e.Size, _ = strconv.ParseInt(f[3], 10, 64)
		if e.Mode == "120000" {
			target, err := g.output("cat-file", "blob", f[2])
			if err != nil {
				return nil, nil, "", err
			}
			e.Target = string(target)
		}
		entries = append(entries, e)
	}
	t, err := srctree.Check(entries, maxBytes)
	if err != nil {
		return nil, nil, "", err
	}
	var data []byte
	if mode, ok := t.Entries[manifest.File]; ok {
		if mode != "100644" && mode != "100755" {
			return nil, nil, "", fmt.Errorf("%s is not a regular file", manifest.File)
		}
		if data, err = g.output("cat-file", "blob", commit+":"+manifest.File); err != nil {
			return nil, nil, "", err
		}
	}
	m, err := manifest.Parse(data)
	if err != nil {
		return nil, nil, "", err
	}
	if mode, ok := t.Entries[manifest.Procfile]; ok {
		if mode != "100644" && mode != "100755" {
			return nil, nil, "", fmt.Errorf("%s is not a regular file", manifest.Procfile)
		}
		if len(m.Processes) > 0 {
			return nil, nil, "", fmt.Errorf("processes are declared in both %s and %s: keep one", manifest.File, manifest.Procfile)
		}
		raw, err := g.output("cat-file", "blob", commit+":"+manifest.Procfile)
		if err != nil {
			return nil, nil, "", err
		}
		if m.Processes, err = manifest.ParseProcfile(raw); err != nil {
			return nil, nil, "", err
		}
	}
	return t, m, strings.TrimSpace(string(subject)), nil
}

// resolveUser finds corpus.yaml's user in the guest.
func (d *deploy) resolveUser() error {
	if d.man.User == "" {
		return nil
	}
	var out bytes.Buffer
	code, err := d.driver.Exec(d.ctx, d.guest.Name, drivers.ExecRequest{
		Argv: []string{"sh", "-c", `id -u "$1" && id -g "$1"`, "sh", d.man.User}, Stdout: &out,
	})
	if err != nil {
		return fmt.Errorf("looking up user %s in guest %s: %v", d.man.User, d.guest.Name, err)
	}
	f := strings.Fields(out.String())
	if code != 0 || len(f) != 2 {
		return fmt.Errorf("user %s (user in corpus.yaml) does not exist in guest %s; create it in the image or remove the setting", d.man.User, d.guest.Name)
	}
	d.uid, _ = strconv.Atoi(f[0])
	d.gid, _ = strconv.Atoi(f[1])
	return nil
}

func (d *deploy) dir() string        { return projectDir(d.project) }
func (d *deploy) releaseDir() string { return d.dir() + "/releases/" + d.name() }

// stepEnv is the environment every step gets.
func (d *deploy) stepEnv(extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range d.man.Env {
		env[k] = v
	}
	// The project's config wins over corpus.yaml's env.
	for k, v := range d.config {
		env[k] = v
	}
	env["CORPUS_PROJECT"] = d.project
	env["CORPUS_ENV"] = d.env.Name
	env["CORPUS_RELEASE"] = d.name()
	env["CORPUS_COMMIT"] = d.release.Commit
	env["CORPUS_DATA"] = d.dir() + "/data"
	env["CORPUS_RELEASE_DIR"] = d.releaseDir()
	env["CORPUS_CURRENT"] = d.dir() + "/current"
	if d.prev != nil {
		env["CORPUS_PREVIOUS_RELEASE"] = corpusv1.ReleaseName(d.prev.Number)
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// exec runs a command in the guest with the step's output handling; a
// non-zero exit is an error.
func (d *deploy) exec(ctx context.Context, argv []string, dir string, env map[string]string, stdin io.Reader, asUser bool) error {
	w := &stepWriter{d: d}
	defer w.flush()
	req := drivers.ExecRequest{Argv: argv, Dir: dir, Env: env, Stdin: stdin, Stdout: w, Stderr: w}
	if asUser {
		req.UID, req.GID = d.uid, d.gid
	}
	ctx, cancel := context.WithTimeout(ctx, d.man.Timeout)
	defer cancel()
	code, err := d.driver.Exec(ctx, d.guest.Name, req)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("timed out after %s (see timeout in corpus.yaml)", d.man.Timeout)
	case err != nil:
		return err
	case code != 0:
		return fmt.Errorf("exit status %d", code)
	}
	return nil
}

// sh runs a short shell script of the pipeline's own as root.
func (d *deploy) sh(script string, args ...string) error {
	return d.exec(d.ctx, append([]string{"sh", "-c", "set -e; " + script, "sh"}, args...), "/", nil, nil, false)
}

// step runs one named step, timing and journalling it.
func (d *deploy) step(name string, f func() (skipped bool, err error)) error {
	d.journal.Step = name
	if err := d.p.cache.SetDeploy(d.journal); err != nil {
		return &stepError{name, fmt.Errorf("journal: %w", err)}
	}
	failpoint.Hit("deploy-" + name)
	d.say("-----> %s", name)
	d.tail = nil
	start := time.Now()
	skipped, err := f()
	st := &corpusv1.ReleaseStep{Name: name, Status: corpusv1.StepOK, DurationMs: time.Since(start).Milliseconds()}
	if skipped {
		st.Status = corpusv1.StepSkipped
	}
	if err != nil {
		st.Status = corpusv1.StepFailed
	}
	d.steps = append(d.steps, st)
	if err != nil {
		return &stepError{name, err}
	}
	return nil
}

// run is the pipeline up to and including the switch.
func (d *deploy) run(g quarantineGit, commit string) error {
	base, rel := d.dir(), d.releaseDir()
	d.stageEarly()
	err := d.step(stepArchive, func() (bool, error) {
		const dirs = `mkdir -p "$1/releases" "$1/archives" "$1/data"`
		if d.prev == nil || !d.runs(stepArchive) {
			if err := d.sh(dirs, base); err != nil {
				return false, err
			}
			if d.prev == nil {
				d.say("       nothing serves yet: nothing to archive")
			}
			return true, nil
		}
		pn := corpusv1.ReleaseName(d.prev.Number)
		arch := base + "/archives/" + pn
		if err := d.sh(dirs+` "$2" && printf 'release=%s\ncommit=%s\narchived=%s\n' "$3" "$4" "$5" > "$2/release.env"`,
			base, arch, pn, d.prev.Commit, time.Now().UTC().Format(time.RFC3339)); err != nil {
			return false, err
		}
		return false, d.hook(base+"/releases/"+pn, "archive", map[string]string{"CORPUS_ARCHIVE": arch, "CORPUS_RELEASE": pn})
	})
	if err != nil {
		return err
	}
	err = d.step(stepReleaseSync, func() (bool, error) {
		if d.image != nil {
			if err := d.syncImage(rel); err != nil {
				return false, err
			}
			return false, d.p.writeReleaseFiles(d.ctx, d.driver, d.guest.Name, d.project, d.stepEnv(nil), d.specOf())
		}
		ctx, cancel := context.WithTimeout(d.ctx, d.man.Timeout)
		defer cancel()
		cmd := g.cmd(ctx, "archive", "--format=tar", commit+"^{tree}")
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return false, err
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return false, err
		}
		chown := ""
		if d.uid != 0 {
			chown = `chown -hR "$2:$3" "$1.tmp"; `
		}
		err = d.exec(d.ctx, []string{"sh", "-c", `set -e; rm -rf "$1.tmp" "$1"; mkdir -p "$1.tmp"; tar -x -f - -C "$1.tmp"; ` + chown + `mv "$1.tmp" "$1"`,
			"sh", rel, strconv.Itoa(d.uid), strconv.Itoa(d.gid)}, "/", nil, pipe, false)
		if werr := cmd.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("git archive: %v: %s", werr, strings.TrimSpace(stderr.String()))
		}
		if err == nil {
			d.say("       %d files, %d bytes in %s", len(d.tree.Entries), d.tree.Size, rel)
			// The release's environment (config included) and how its
			// processes run, for the supervisor, restarts and rollbacks.
			err = d.p.writeReleaseFiles(d.ctx, d.driver, d.guest.Name, d.project, d.stepEnv(nil), d.specOf())
		}
		return false, err
	})
	if err != nil {
		return err
	}
	err = d.step(stepInstall, func() (bool, error) {
		if !d.runs(stepInstall) {
			return true, nil
		}
		if len(d.tree.Install) == 0 {
			d.say("       no steps in %s", manifest.InstallDir)
			return true, nil
		}
		for _, name := range d.tree.Install {
			d.say("-----> install %s", name)
			d.tail = nil
			if err := d.exec(d.ctx, []string{"./" + manifest.InstallDir + "/" + name}, rel, d.stepEnv(nil), nil, true); err != nil {
				return false, fmt.Errorf("%s: %w", name, err)
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	err = d.step(stepFixperms, func() (bool, error) {
		if !d.runs(stepFixperms) {
			return true, nil
		}
		if d.image != nil {
			d.say("       the image's files keep their owners")
			return true, nil
		}
		if d.tree.Hooks["fixperms"] {
			return false, d.exec(d.ctx, []string{"./" + manifest.Dir + "/fixperms"}, rel, d.stepEnv(nil), nil, false)
		}
		if d.uid == 0 {
			d.say("       files belong to root (set user: in %s to change it)", manifest.File)
			return true, nil
		}
		return false, d.sh(`chown -hR "$2:$3" "$1"; chown "$2:$3" "$4"`, rel, strconv.Itoa(d.uid), strconv.Itoa(d.gid), base+"/data")
	})
	if err != nil {
		return err
	}
	err = d.step(stepStart, func() (bool, error) {
		if len(d.man.Processes) == 0 {
			d.say("       no processes (a Procfile, or processes: in %s)", manifest.File)
			return true, nil
		}
		gen, err := d.p.startGeneration(d.ctx, d.driver, d.guest, d.project, d.env, d.instance, d.specOf(), d.name(), d.say)
		if d.image != nil {
			err = portHint(err, d.image.Image.WebPort(), d.image.Image.Ports())
		}
		var es *errStart
		if errors.As(err, &es) {
			d.tail = es.tail
		}
		d.gen = gen
		return false, err
	})
	if err != nil {
		return err
	}
	err = d.step(stepHealth, func() (bool, error) {
		switch {
		case d.gen != nil && d.gen.port != 0:
			d.say("       web answered on its new port (start)")
			return true, nil
		case !d.runs(stepHealth):
			return true, nil
		case d.man.Health == nil || d.man.Health.HTTP == nil:
			d.say("       no health check in %s", manifest.File)
			return true, nil
		}
		c := d.man.Health.HTTP
		if d.guest.Address == "" {
			return false, errors.New("the guest has no address to check")
		}
		url := "http://" + d.guest.Address + ":" + strconv.Itoa(c.Port) + c.Path
		status, err := webcheck.Wait(d.ctx, url, c.Timeout, func(code int) bool { return code < 400 })
		if err == nil {
			d.say("       GET %s: %s", url, status)
		}
		return false, err
	})
	if err != nil {
		return err
	}
	switch {
	case d.stage:
		return nil
	case d.strategy == strategyBlueGreen:
		return d.blueGreen()
	}
	err = d.step(stepSwitch, func() (bool, error) {
		changed := d.instance <= 1 && !slices.Equal(d.man.Domains, d.env.ManifestDomains)
		if changed {
			if err := d.setDomains(d.man.Domains); err != nil {
				return false, fmt.Errorf("routing the domains of %s: %w", manifest.File, err)
			}
			d.say("       domains routed: %s", strings.Join(append(append([]string(nil), d.env.Domains...), d.man.Domains...), ", "))
		}
		if err := d.switchTo(d.name()); err != nil {
			if changed {
				d.setDomains(d.env.ManifestDomains)
			}
			return false, err
		}
		failpoint.Hit("deploy-switched")
		d.say("       current -> releases/%s", d.name())
		if d.gen != nil && d.gen.port != 0 {
			// Journalled first: a crash from here on puts the routes back.
			d.journal.OldWebPort = d.gen.oldPort
			if err := d.p.cache.SetDeploy(d.journal); err != nil {
				return false, fmt.Errorf("journal: %w", err)
			}
			return false, d.gen.switchTraffic(d.ctx)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	return d.roll()
}

// runs says whether a step runs: all do, unless corpus deploy --only
// names some.
func (d *deploy) runs(step string) bool {
	return len(d.only) == 0 || slices.Contains(d.only, step)
}

func (d *deploy) setDomains(domains []string) error {
	_, err := coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.SetManifestDomainsResponse], error) {
		return c.SetManifestDomains(d.ctx, connect.NewRequest(&corpusv1.SetManifestDomainsRequest{Project: d.project, Env: d.env.Name, Domains: domains}))
	})
	return err
}

// switchTo points current at a release in one rename.
func (d *deploy) switchTo(name string) error {
	return switchCurrent(d.ctx, d.driver, d.guest.Name, d.project, name)
}

func switchCurrent(ctx context.Context, drv drivers.Driver, guest, project, name string) error {
	var out bytes.Buffer
	code, err := drv.Exec(ctx, guest, drivers.ExecRequest{
		Argv: []string{"sh", "-c", `set -e; cd "$1"; test -d "releases/$2"; rm -f current.new; ln -s "releases/$2" current.new; mv -T current.new current`,
			"sh", projectDir(project), name},
		Stdout: &out, Stderr: &out,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("switching to %s: exit status %d: %s", name, code, strings.TrimSpace(out.String()))
	}
	return err
}

// hook runs a project hook from a release's tree when it has one.
func (d *deploy) hook(releaseDir, name string, extra map[string]string) error {
	script := releaseDir + "/" + manifest.Dir + "/" + name
	var probe bytes.Buffer
	code, err := d.driver.Exec(d.ctx, d.guest.Name, drivers.ExecRequest{Argv: []string{"test", "-x", script}, Stdout: &probe})
	if err != nil {
		return err
	}
	if code != 0 {
		return nil
	}
	d.say("       running %s/%s", manifest.Dir, name)
	return d.exec(d.ctx, []string{script}, releaseDir, d.stepEnv(extra), nil, true)
}
