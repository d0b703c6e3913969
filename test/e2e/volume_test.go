package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

type volumeList struct {
	Volumes []struct {
		Volume struct {
			Name      string `json:"name"`
			SizeBytes string `json:"size_bytes"`
			GuestName string `json:"guest_name"`
			Observed  struct {
				State     string `json:"state"`
				UsedBytes string `json:"used_bytes"`
			} `json:"observed"`
		} `json:"volume"`
		NodeName string `json:"node_name"`
	} `json:"volumes"`
}

// TestVolumes: a guest's data lives on a volume of its own, mounted inside
// it; the volume outlives the guest, a new guest binds it and finds the
// data, a full volume gives ENOSPC inside only, and --purge removes it.
func TestVolumes(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	c.mustCLI("guest", "create", "db", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--volume", "64M")
	out := c.mustCLI("guest", "exec", "db", "--", "sh", "-c", "df -k /srv/data | tail -1; echo keep > /srv/data/file")
	fields := strings.Fields(out)
	var blocks int
	if len(fields) > 1 {
		blocks, _ = strconv.Atoi(fields[1])
	}
	if blocks < 50000 || blocks > 66000 { // 64 MiB less ext4's own metadata, in 1K blocks
		t.Errorf("df inside the guest = %q, want a ~64 MiB file system at /srv/data", out)
	}
	listed := func(want func(volumeList) error) {
		t.Helper()
		eventually(t, 15*time.Second, "volume list", func() error {
			var l volumeList
			if err := c.json(&l, "volume", "list"); err != nil {
				return err
			}
			return want(l)
		})
	}
	listed(func(l volumeList) error {
		if len(l.Volumes) != 1 {
			return fmt.Errorf("%d volumes", len(l.Volumes))
		}
		v := l.Volumes[0]
		if v.Volume.Name != "db" || v.NodeName != "n1" || v.Volume.GuestName != "db" || v.Volume.Observed.State != "ready" || v.Volume.SizeBytes != fmt.Sprint(64<<20) {
			b, _ := json.Marshal(v)
			return fmt.Errorf("volume = %s", b)
		}
		return nil
	})

	// Enlarge: the guest sees the new size at once (online where the node
	// can; here the guest is briefly stopped), and the data is intact.
	dfBlocks := func(guest string) int {
		t.Helper()
		out := c.mustCLI("guest", "exec", guest, "--", "sh", "-c", "df -k /srv/data | tail -1")
		f := strings.Fields(out)
		if len(f) < 2 {
			t.Fatalf("df = %q", out)
		}
		n, _ := strconv.Atoi(f[1])
		return n
	}
	c.mustCLI("volume", "enlarge", "db", "+32M")
	if n := dfBlocks("db"); n < 80000 || n > 99000 {
		t.Errorf("df blocks after enlarging to 96M = %d, want about 90000", n)
	}
	if out := c.mustCLI("guest", "exec", "db", "--", "cat", "/srv/data/file"); strings.TrimSpace(out) != "keep" {
		t.Errorf("data after enlarge = %q, want keep", out)
	}
	// Trim: refused when the data would not fit with the margin, nothing
	// changed; allowed otherwise.
	if _, errOut, code := c.cli("volume", "trim", "db", "40M"); code == 0 || !strings.Contains(errOut, "nothing changed") {
		t.Errorf("trimming below used+margin = exit %d, %q; want a refusal", code, errOut)
	}
	if n := dfBlocks("db"); n < 80000 {
		t.Errorf("df blocks after a refused trim = %d, want unchanged", n)
	}
	c.mustCLI("volume", "trim", "db", "-16M")
	if n := dfBlocks("db"); n < 66000 || n > 82000 {
		t.Errorf("df blocks after trimming to 80M = %d, want about 74000", n)
	}
	if out := c.mustCLI("guest", "exec", "db", "--", "cat", "/srv/data/file"); strings.TrimSpace(out) != "keep" {
		t.Errorf("data after trim = %q, want keep", out)
	}

	// Snapshot: a sparse, consistent copy on the node, the guest running.
	out = c.mustCLI("volume", "snapshot", "db")
	node, snapPath, _ := strings.Cut(strings.Fields(out)[0], ":")
	if node != "n1" || !strings.HasPrefix(snapPath, a.stateDir) {
		t.Errorf("volume snapshot = %q, want a file under n1's state folder", out)
	} else if fsck, err := exec.Command("e2fsck", "-f", "-n", snapPath).CombinedOutput(); err != nil {
		t.Errorf("e2fsck of the snapshot: %v\n%s", err, fsck)
	} else if got, _ := exec.Command("debugfs", "-R", "cat /file", snapPath).Output(); !strings.Contains(string(got), "keep") {
		t.Errorf("file in the snapshot = %q, want keep", got)
	}

	// Full volume: ENOSPC inside, nothing else affected.
	_, errOut, code := c.cli("guest", "exec", "db", "--", "dd", "if=/dev/zero", "of=/srv/data/fill", "bs=1M", "count=200")
	if code == 0 || !strings.Contains(errOut, "No space left") {
		t.Errorf("filling the volume = exit %d, %q; want ENOSPC", code, errOut)
	}
	c.mustCLI("guest", "exec", "db", "--", "rm", "/srv/data/fill")

	// The volume outlives its guest and moves to a replacement.
	c.mustCLI("guest", "delete", "db")
	listed(func(l volumeList) error {
		if len(l.Volumes) != 1 || l.Volumes[0].Volume.GuestName != "" {
			return fmt.Errorf("volumes after guest delete = %+v, want db unbound", l.Volumes)
		}
		return nil
	})
	for _, bad := range [][]string{
		{"guest", "create", "x", "--image", "busybox", "--volume", "1M"},
		{"guest", "create", "x", "--image", "busybox", "--use-volume", "nope"},
		{"guest", "create", "x", "--image", "busybox", "--volume", "64M", "--use-volume", "db"},
		{"guest", "create", "x", "--image", "busybox", "--volume", "64M", "--volume-path", "relative"},
		{"volume", "delete", "nope", "--yes"},
	} {
		if _, errOut, code := c.cli(bad...); code == 0 {
			t.Errorf("corpus %v succeeded; want a refusal (%s)", bad, errOut)
		}
	}
	c.mustCLI("guest", "create", "db2", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--use-volume", "db")
	if out := c.mustCLI("guest", "exec", "db2", "--", "cat", "/srv/data/file"); strings.TrimSpace(out) != "keep" {
		t.Errorf("data on the volume in the new guest = %q, want keep", out)
	}
	if _, errOut, code := c.cli("volume", "delete", "db", "--yes"); code == 0 || !strings.Contains(errOut, "used by guest db2") {
		t.Errorf("deleting a bound volume = exit %d, %q; want a refusal", code, errOut)
	}

	// --purge deletes the volume with the guest.
	c.mustCLI("guest", "delete", "db2", "--purge")
	listed(func(l volumeList) error {
		if len(l.Volumes) != 0 {
			return fmt.Errorf("volumes after purge = %+v", l.Volumes)
		}
		return nil
	})
	if imgs, _ := filepath.Glob(filepath.Join(a.stateDir, "volumes", "images", "*.img")); len(imgs) != 0 {
		t.Errorf("volume images left after purge: %v", imgs)
	}
	if _, err := os.Stat(filepath.Join(a.stateDir, "volumes", "images")); err != nil {
		t.Errorf("volume root: %v", err)
	}
}

// TestVolumeMove: an unbound volume moves to another node by copy, with
// progress; a guest bound to it then runs there with the data, and the old
// node keeps no copy.
func TestVolumeMove(t *testing.T) {
	c := newCluster(t)
	c.addAgent("n1")
	c.addAgent("n2")
	c.mustCLI("guest", "create", "db", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--volume", "64M")
	from := c.guest("db").NodeName
	to := map[string]string{"n1": "n2", "n2": "n1"}[from]
	c.mustCLI("guest", "exec", "db", "--", "sh", "-c", "echo moved > /srv/data/file")
	if _, errOut, code := c.cli("volume", "move", "db", "--to", to); code == 0 || !strings.Contains(errOut, "used by guest db") {
		t.Errorf("moving a bound volume = exit %d, %q; want a refusal", code, errOut)
	}
	c.mustCLI("guest", "delete", "db")
	out, errOut, code := c.cli("volume", "move", "db", "--to", to)
	if code != 0 || !strings.Contains(out, "moved to node "+to) || !strings.Contains(errOut, "%)") {
		t.Fatalf("volume move = exit %d, %q, %q; want it moved, with progress", code, out, errOut)
	}
	c.mustCLI("guest", "create", "db2", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--use-volume", "db")
	if got := c.guest("db2").NodeName; got != to {
		t.Errorf("guest with the moved volume placed on %s, want %s", got, to)
	}
	if out := c.mustCLI("guest", "exec", "db2", "--", "cat", "/srv/data/file"); strings.TrimSpace(out) != "moved" {
		t.Errorf("data after the move = %q, want moved", out)
	}
	src := c.agents[from]
	eventually(t, 10*time.Second, "old copy removed", func() error {
		if imgs, _ := filepath.Glob(filepath.Join(src.stateDir, "volumes", "images", "*.img")); len(imgs) != 0 {
			return fmt.Errorf("old node %s still has volume images %v", from, imgs)
		}
		return nil
	})
	c.mustCLI("guest", "delete", "db2", "--purge")
}

// TestVolumeBackup: a volume's files are backed up while its guest
// writes (the file system frozen only while the snapshot is copied on its
// node: the writer's longest pause is logged), kept on the other node;
// the backup exports as a tar.gz; a restore stops the guest, brings back
// the files as they were (a file added since goes), starts it again; a
// corrupt backup is refused and changes nothing; a schedule is set.
func TestVolumeBackup(t *testing.T) {
	c := newCluster(t)
	c.addAgent("n1")
	c.addAgent("n2")
	c.mustCLI("guest", "create", "db", "--image", "busybox", "--memory", "64M", "--cpus", "0.2", "--volume", "64M")
	from := c.guest("db").NodeName
	other := map[string]string{"n1": "n2", "n2": "n1"}[from]
	sh := func(script string) string {
		t.Helper()
		return strings.TrimSpace(c.mustCLI("guest", "exec", "db", "--", "sh", "-c", script))
	}
	sh("mkdir -p /srv/data/sub && echo kept > /srv/data/sub/file && chmod 600 /srv/data/sub/file && dd if=/dev/urandom of=/srv/data/blob bs=1M count=8 2>/dev/null")
	sum := sh("md5sum /srv/data/blob | cut -d' ' -f1")
	// A writer that notes the time every 10 ms while the backup runs.
	// (Times from /proc/uptime: busybox's date has no nanoseconds.)
	c.mustCLI("guest", "exec", "db", "--", "sh", "-c", "(while :; do cut -d' ' -f1 /proc/uptime >> /srv/data/ticks; usleep 10000; done) >/dev/null 2>&1 &")
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	out, errOut, code := c.cli("volume", "backup", "db")
	took := time.Since(start)
	if code != 0 || !strings.Contains(out, "done: backup") {
		t.Fatalf("volume backup: exit %d\n%s%s", code, out, errOut)
	}
	time.Sleep(300 * time.Millisecond)
	ticks := strings.Fields(sh("cat /srv/data/ticks"))
	uptime := func(s string) time.Duration {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("tick %q: %v", s, err)
		}
		return time.Duration(f * float64(time.Second))
	}
	var maxGap time.Duration
	for i := 1; i < len(ticks); i++ {
		maxGap = max(maxGap, uptime(ticks[i])-uptime(ticks[i-1]))
	}
	t.Logf("volume backup of 8 MiB took %s; the writer's longest pause meanwhile %s (%d ticks)", took.Round(time.Millisecond), maxGap.Round(time.Millisecond), len(ticks))
	now, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	if since := uptime(strings.Fields(string(now))[0]) - uptime(ticks[len(ticks)-1]); since > 5*time.Second {
		t.Errorf("the writer stopped during the backup (last tick %s ago): the file system stayed frozen?", since)
	}
	sh("pkill -f usleep; pkill -f ticks; true")
	var list struct {
		Backups []struct {
			Backup struct {
				Id     string `json:"id"`
				Volume string `json:"volume"`
			} `json:"backup"`
			NodeName string `json:"node_name"`
		} `json:"backups"`
	}
	if err := c.json(&list, "volume", "backups", "db"); err != nil || len(list.Backups) != 1 || list.Backups[0].NodeName != other || list.Backups[0].Backup.Volume != "db" {
		t.Fatalf("volume backups: %v %+v; want one, kept on %s", err, list, other)
	}
	id := list.Backups[0].Backup.Id
	file := filepath.Join(tempDir(t), "db.tar.gz")
	c.mustCLI("service", "export", id, "-o", file)
	if out, err := exec.Command("tar", "tzf", file).CombinedOutput(); err != nil || !strings.Contains(string(out), "./sub/file") {
		t.Errorf("the exported backup: %v\n%s", err, out)
	}

	sh("echo changed > /srv/data/sub/file && echo new > /srv/data/added && rm /srv/data/blob")
	out, errOut, code = c.cli("volume", "restore", "db")
	if code != 0 || !strings.Contains(errOut, "stopping guest db") || !strings.Contains(out, "done: restored from backup "+id) {
		t.Fatalf("volume restore: exit %d\n%s%s", code, out, errOut)
	}
	waitRunning(t, c, "db")
	if got := sh("cat /srv/data/sub/file; stat -c %a /srv/data/sub/file; md5sum /srv/data/blob | cut -d' ' -f1; ls /srv/data/added 2>&1 || true"); !strings.HasPrefix(got, "kept\n600\n"+sum+"\n") || !strings.Contains(got, "No such file") {
		t.Errorf("after the restore:\n%s\nwant kept, 600, %s, added gone", got, sum)
	}
	// A backup with another checksum than recorded is refused whole.
	holder := c.agents[other]
	kept := filepath.Join(holder.stateDir, "backups", id+".backup")
	if err := os.WriteFile(kept, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	sh("echo after > /srv/data/sub/file")
	if out, errOut, code := c.cli("volume", "restore", "db"); code == 0 {
		t.Errorf("restoring a corrupt backup succeeded:\n%s%s", out, errOut)
	}
	waitRunning(t, c, "db")
	if got := sh("cat /srv/data/sub/file"); got != "after" {
		t.Errorf("a refused restore changed the files: %q", got)
	}
	c.mustCLI("volume", "update", "db", "--backup-schedule", "daily", "--keep", "3")
	if out := c.mustCLI("volume", "update", "db", "--backup-schedule", "daily", "--keep", "3"); !strings.Contains(out, "daily, keeping 3 (unchanged)") {
		t.Errorf("volume update again: %s", out)
	}
}

// TestVolumeResizeCrash: an agent that dies in the middle of an enlarge or
// a trim (a failpoint exits it as kill -9 would) finishes the resize after
// its restart: the volume ends at the new size, mounted in the running
// guest, with its data, and with exactly one loop device.
func TestVolumeResizeCrash(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	c.mustCLI("guest", "create", "db", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--volume", "96M")
	c.mustCLI("guest", "exec", "db", "--", "sh", "-c", "echo safe > /srv/data/file")
	image := filepath.Join(a.stateDir, "volumes", "images", "db.img")

	for _, step := range []struct {
		failpoint string
		resize    []string
		wantBytes int64
	}{
		{"volume-grow-image-grown", []string{"volume", "enlarge", "--timeout", "2s", "db", "128M"}, 128 << 20},
		{"volume-shrink-fs-shrunk", []string{"volume", "trim", "--timeout", "2s", "db", "80M"}, 80 << 20},
		{"volume-resize-unmounted", []string{"volume", "enlarge", "--timeout", "2s", "db", "112M"}, 112 << 20},
	} {
		t.Run(step.failpoint, func(t *testing.T) {
			a.kill()
			a.proc = c.startAgentEnv(a, []string{"CORPUS_FAILPOINTS=" + step.failpoint})
			// It times out: the agent dies on the way. A trim is admitted
			// on what the agent measures, once it answers.
			eventually(t, 30*time.Second, "resize admitted", func() error {
				if _, errOut, _ := c.cli(step.resize...); strings.Contains(errOut, "measuring what it holds") {
					return errors.New(strings.TrimSpace(errOut))
				}
				return nil
			})
			select {
			case <-a.done:
			case <-time.After(testrun.D(30 * time.Second)):
				t.Fatalf("agent did not hit failpoint %s", step.failpoint)
			}
			a.proc = c.startAgent(a)
			eventually(t, 60*time.Second, "volume at its new size after the restart", func() error {
				var v struct {
					Volume struct {
						Volume struct {
							Observed struct {
								State     string `json:"state"`
								SizeBytes string `json:"size_bytes"`
							} `json:"observed"`
						} `json:"volume"`
					} `json:"volume"`
				}
				if err := c.json(&v, "volume", "show", "db"); err != nil {
					return err
				}
				o := v.Volume.Volume.Observed
				if o.State != "ready" || o.SizeBytes != fmt.Sprint(step.wantBytes) {
					return fmt.Errorf("observed %+v", o)
				}
				if g := c.guest("db"); g.Status != "running" {
					return fmt.Errorf("guest %s", g.Status)
				}
				return nil
			})
			out, _, code := c.cli("guest", "exec", "db", "--", "cat", "/srv/data/file")
			if code != 0 || strings.TrimSpace(out) != "safe" {
				t.Errorf("data after the crash = %q (exit %d), want safe", out, code)
			}
			lo, _ := exec.Command("losetup", "-j", image).Output()
			if n := len(strings.Split(strings.TrimSpace(string(lo)), "\n")); strings.TrimSpace(string(lo)) == "" || n != 1 {
				t.Errorf("loop devices for the image = %q, want exactly one", lo)
			}
		})
	}
}

// TestVolumeSizes: a volume asked for at a size that is not a multiple
// of the block size is recorded at the size rounded up, which its node
// makes exactly, and its guest is left running pass after pass (the node
// took the difference for a shrink: it stopped the guest, shrank nothing
// and started it again, every pass). A trim that the data written just
// before does not fit in is refused from what the node measures now,
// nothing changed: the guest runs on and the volume keeps its size (the
// last report, taken before the write, let it through, and the node then
// restarted the guest on every pass for ever).
func TestVolumeSizes(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	c.mustCLI("guest", "create", "db", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--volume", "100000000")
	const rounded = 100003840 // 100000000 rounded up to 4 KiB
	showVolume := func() (desired, observed int64, state string) {
		t.Helper()
		var v struct {
			Volume struct {
				Volume struct {
					SizeBytes string `json:"size_bytes"`
					Observed  struct {
						State            string `json:"state"`
						SizeBytes        string `json:"size_bytes"`
						RefusedSizeBytes string `json:"refused_size_bytes"`
					} `json:"observed"`
				} `json:"volume"`
			} `json:"volume"`
		}
		if err := c.json(&v, "volume", "show", "db"); err != nil {
			t.Fatal(err)
		}
		vol := v.Volume.Volume
		desired, _ = strconv.ParseInt(vol.SizeBytes, 10, 64)
		observed, _ = strconv.ParseInt(vol.Observed.SizeBytes, 10, 64)
		state = vol.Observed.State
		if vol.Observed.RefusedSizeBytes != "" {
			state += ", refused " + vol.Observed.RefusedSizeBytes
		}
		return desired, observed, state
	}
	if desired, _, _ := showVolume(); desired != rounded {
		t.Errorf("volume size = %d, want %d (100000000 rounded up to the block size)", desired, rounded)
	}
	guestPID := func() int {
		t.Helper()
		st, pid, err := a.lxc.info("db")
		if err != nil || st != "RUNNING" {
			t.Fatalf("guest db = %s, %v; want RUNNING", st, err)
		}
		return pid
	}
	eventually(t, 30*time.Second, "volume at its size, guest running", func() error {
		if desired, observed, st := showVolume(); observed != desired || st != "ready" {
			return fmt.Errorf("volume of %d bytes observed at %d, %s", desired, observed, st)
		}
		if g := c.guest("db"); g.Status != "running" {
			return fmt.Errorf("guest %s", g)
		}
		return nil
	})
	pid := guestPID()
	// Three more passes of the agent (a pass every 2 s here) leave the
	// guest alone.
	passes := agentReconciles(t, a)
	eventually(t, 30*time.Second, "three more reconcile passes", func() error {
		if n := agentReconciles(t, a); n < passes+3 {
			return fmt.Errorf("%d passes since", n-passes)
		}
		return nil
	})
	if now := guestPID(); now != pid || strings.Contains(a.log.String(), `volume resized`) {
		t.Errorf("guest init PID %d, was %d; agent log has a resize: %v; want the guest left running", now, pid, strings.Contains(a.log.String(), `volume resized`))
	}

	// The agent passes only when told something (no resync for an
	// hour), so its last report of the volume predates the write.
	c.mustCLI("volume", "enlarge", "db", "256M")
	a.kill()
	a.proc = c.startAgent(a, "--resync-interval", "1h")
	c.waitAgentListening(a)
	c.waitAgentBack(a)
	eventually(t, 30*time.Second, "volume at 256 MiB, guest running", func() error {
		if _, observed, st := showVolume(); observed != 256<<20 || st != "ready" {
			return fmt.Errorf("volume observed at %d, %s", observed, st)
		}
		if g := c.guest("db"); g.Status != "running" {
			return fmt.Errorf("guest %s", g)
		}
		return nil
	})
	pid = guestPID()
	c.mustCLI("guest", "exec", "db", "--", "dd", "if=/dev/zero", "of=/srv/data/fill", "bs=1M", "count=100")
	_, errOut, code := c.cli("volume", "trim", "--timeout", "20s", "db", "128M")
	if code == 0 || !strings.Contains(errOut, "used needs at least") || !strings.Contains(errOut, "nothing changed") {
		t.Errorf("trimming 100 MB of fresh data to 128M = exit %d, %q; want a refusal from the node's measurement", code, errOut)
	}
	if desired, observed, st := showVolume(); desired != 256<<20 || observed != 256<<20 || st != "ready" {
		t.Errorf("volume after the refused trim = %d bytes desired, %d observed, %s; want 256 MiB, ready", desired, observed, st)
	}
	if now := guestPID(); now != pid {
		t.Errorf("guest init PID %d after the refused trim, was %d; want the guest left running", now, pid)
	}
	if g := c.guest("db"); g.Status != "running" {
		t.Errorf("guest after the refused trim = %s, want running", g)
	}
}

// agentReconciles is how many guest reconcile passes agent a has made,
// from its metrics (served on its namespace's loopback).
func agentReconciles(t *testing.T, a *agentProc) int {
	t.Helper()
	out, err := exec.Command("nsenter", "--net=/run/netns/"+a.node.ns, "curl", "-sf", "http://127.0.0.1:9465/metrics").Output()
	if err != nil {
		t.Fatalf("scraping agent %s's metrics: %v", a.name, err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "corpus_agent_reconcile_duration_seconds_count"); ok {
			f := strings.Fields(rest)
			v, _ := strconv.Atoi(f[len(f)-1])
			n += v
		}
	}
	return n
}
