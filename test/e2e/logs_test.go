package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// follower is a running `corpus ... -f`, its lines collected.
type follower struct {
	cmd  *exec.Cmd
	done chan error
	mu   sync.Mutex
	got  []string
	at   []time.Time // when each line arrived
}

// follow starts a client command that streams, from the coordinator's
// namespace; it is killed at the test's end.
func (c *cluster) follow(args ...string) *follower {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	args = append([]string{"--net=/run/netns/" + c.lab.ctl, corpusBin, "--address", c.api, "--token", c.token, "--ca-cert", c.ca}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+c.cfgHome, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	f := &follower{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			f.mu.Lock()
			f.got = append(f.got, sc.Text())
			f.at = append(f.at, time.Now())
			f.mu.Unlock()
		}
		io.Copy(io.Discard, out)
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, errOut.String())
		}
		f.done <- err
	}()
	c.t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

// waitLine waits for a line containing want and returns it.
func (f *follower) waitLine(t *testing.T, within time.Duration, want string) string {
	t.Helper()
	var line string
	eventually(t, within, "a followed line with "+want, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, l := range f.got {
			if strings.Contains(l, want) {
				line = l
				return nil
			}
		}
		return fmt.Errorf("%d lines, none with %q (last: %q)", len(f.got), want, f.got[max(0, len(f.got)-3):])
	})
	return line
}

func (l *deployLab) commitLogSite(version string) {
	l.t.Helper()
	l.write("www/index.html", "version "+version+"\n", 0o644)
	// The web prints escape sequences too (clear the screen, retitle
	// the window): logs shows them escaped.
	l.write("Procfile", `web: printf 'paint `+version+` \033[2J\033]0;owned\007 done\n'; echo "web of `+version+` on $PORT"; exec httpd -f -p "$PORT" -h www
ticker: i=0; while :; do i=$((i+1)); echo "tick `+version+` $i"; sleep 0.2; done
`, 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "log site "+version)
}

// TestLogs: a project's process output and deploy steps reach `corpus
// logs`, which follows them across a deploy within about a second; the
// node's cap holds under a process printing as fast as it can; a
// guest's follow ends when it is deleted.
func TestLogs(t *testing.T) {
	shipped := filepath.Join(tempDir(t), "guests.jsonl")
	l := newDeployLab(t, "--log-max-bytes", strconv.Itoa(2<<20), "--log-ship-file", shipped)
	c := l.c
	l.commitLogSite("one")
	l.mustPush()
	l.wantPage("version one")

	// The deploy's steps and the processes' first lines.
	eventually(t, 10*time.Second, "the web's first line in the logs", func() error {
		out := c.mustCLI("logs", "hello", "--tail", "0")
		for _, want := range []string{"deploy[r1]: -----> start", "app[web r1]: web of one on 81", "app[ticker r1]: tick one"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("logs lack %q:\n%s", want, out)
			}
		}
		return nil
	})
	// A tenant's escape sequences reach the operator's terminal only
	// when asked for.
	eventually(t, 10*time.Second, "the web's escape sequences in the logs", func() error {
		out := c.mustCLI("logs", "hello", "--process", "web", "--tail", "0")
		if want := `app[web r1]: paint one \x1b[2J\x1b]0;owned\x07 done`; !strings.Contains(out, want) || strings.ContainsAny(out, "\x1b\x07") {
			return fmt.Errorf("logs lack %q, or hold a raw escape:\n%q", want, out)
		}
		return nil
	})
	if out := c.mustCLI("logs", "hello", "--process", "web", "--tail", "0", "--raw"); !strings.Contains(out, "paint one \x1b[2J\x1b]0;owned\x07 done") {
		t.Errorf("logs --raw lacks the escape sequences as printed:\n%q", out)
	}
	if out := c.mustCLI("logs", "hello", "--source", "deploy", "--tail", "0"); strings.Contains(out, "app[") || !strings.Contains(out, "r1 is live") {
		t.Errorf("deploy logs:\n%s", out)
	}
	if out := c.mustCLI("guest", "logs", "hello-dev", "--process", "web", "--tail", "1"); strings.Count(out, "\n") != 1 || !strings.Contains(out, "web of one") {
		t.Errorf("guest logs --process web --tail 1:\n%s", out)
	}
	var js struct {
		Source  string `json:"source"`
		Process string `json:"process"`
		Release string `json:"release"`
		Line    string `json:"line"`
	}
	if err := json.Unmarshal([]byte(c.mustCLI("logs", "hello", "--process", "web", "--tail", "1", "--json")), &js); err != nil ||
		js.Source != "app" || js.Process != "web" || js.Release != "r1" {
		t.Errorf("--json line: %+v, %v", js, err)
	}
	for _, bad := range [][]string{{"--source", "nope"}, {"--process", "Web!"}, {"--since", "yesterday"}} {
		if _, stderr, code := c.cli(append([]string{"logs", "hello"}, bad...)...); code == 0 {
			t.Errorf("logs %v was accepted", bad)
		} else if stderr == "" {
			t.Errorf("logs %v: no error message", bad)
		}
	}

	// The guest's console (what its init says) is its system source.
	eventually(t, 10*time.Second, "console lines", func() error {
		if out := c.mustCLI("guest", "logs", "hello-dev", "--source", "system", "--tail", "0"); !strings.Contains(out, "system: ") {
			b, err := os.ReadFile(filepath.Join(l.a.stateDir, "lxc", "hello-dev", "console.log"))
			return fmt.Errorf("no console lines:\n%s\nconsole.log: %q %v", out, b, err)
		}
		return nil
	})

	// Every stored line is shipped too, here to a JSON lines file.
	eventually(t, 10*time.Second, "lines shipped", func() error {
		b, _ := os.ReadFile(shipped)
		for _, want := range []string{`"guest":"hello-dev","project":"hello","source":"app","process":"web","release":"r1","line":"web of one on 81"`, `"source":"deploy"`} {
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("%s lacks %s", shipped, want)
			}
		}
		return nil
	})

	// Following: ticker lines arrive within about a second of being
	// printed (the time a line shows is when the supervisor read it),
	// and the follow goes on across a deploy, showing its steps.
	f := c.follow("logs", "hello", "-f", "--tail", "1")
	f.waitLine(t, 10*time.Second, "tick one")
	time.Sleep(2 * time.Second)
	var lags []time.Duration
	f.mu.Lock()
	for i, line := range f.got {
		if i == 0 {
			continue // the tail: printed before the follow began
		}
		stamp, _, _ := strings.Cut(line, " ")
		if printed, err := time.Parse("2006-01-02T15:04:05.000Z07:00", stamp); err == nil && strings.Contains(line, "tick one") {
			lags = append(lags, f.at[i].Sub(printed))
		}
	}
	f.mu.Unlock()
	slices.Sort(lags)
	if len(lags) < 5 {
		t.Fatalf("%d ticker lines in 2 s of following: %q", len(lags), f.got)
	}
	t.Logf("printed → shown by logs -f: median %s, max %s (%d lines)", lags[len(lags)/2], lags[len(lags)-1], len(lags))
	if lags[len(lags)/2] > time.Second {
		t.Errorf("logs -f showed lines a median %s after they were printed", lags[len(lags)/2])
	}
	l.commitLogSite("two")
	l.mustPush()
	f.waitLine(t, 10*time.Second, "deploy[r2]: -----> start")
	f.waitLine(t, 10*time.Second, "r2 is live")
	f.waitLine(t, 10*time.Second, "tick two")
	f.waitLine(t, 10*time.Second, `paint two \x1b[2J\x1b]0;owned\x07 done`)

	// The agent restarts: the follow goes on, and the lines the guest
	// printed meanwhile are stored once each.
	args := l.a.proc.args
	l.a.kill()
	time.Sleep(2 * time.Second)
	l.a.proc = startIn(t, l.a.node.ns, "agent n1", nil, args...)
	f.mu.Lock()
	seen := len(f.got)
	f.mu.Unlock()
	eventually(t, 30*time.Second, "lines after the agent restarted", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, line := range f.got[seen:] {
			if strings.Contains(line, "tick two") {
				return nil
			}
		}
		return fmt.Errorf("%d lines since the restart", len(f.got)-seen)
	})
	ticks := map[string]int{}
	for _, line := range strings.Split(c.mustCLI("logs", "hello", "--process", "ticker", "--tail", "0"), "\n") {
		if _, n, ok := strings.Cut(line, "tick two "); ok {
			ticks[n]++
		}
	}
	for n, k := range ticks {
		if k != 1 {
			t.Errorf("tick two %s is stored %d times", n, k)
		}
	}
	for i := 1; i < len(ticks); i++ {
		if ticks[strconv.Itoa(i)] == 0 {
			t.Errorf("tick two %d is missing after the agent restarted (of %d)", i, len(ticks))
		}
	}

	// A process printing as fast as it can: the node keeps at most its
	// cap, and the agent keeps answering.
	l.write("Procfile", "web: exec httpd -f -p \"$PORT\" -h www\nnoise: exec yes 'noise noise noise noise noise noise noise noise noise noise noise noise'\n", 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "noise")
	l.mustPush()
	time.Sleep(5 * time.Second)
	if p := l.proc("noise"); p.State != "running" {
		t.Errorf("noise = %+v", p)
	}
	var size int64
	filepath.Walk(filepath.Join(l.a.stateDir, "logs"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return nil
	})
	t.Logf("the node keeps %d bytes of logs with a cap of %d under a noisy process", size, 2<<20)
	if size > 2<<20+(2<<20)/8+64<<10 || size < 1<<20 {
		t.Errorf("the node keeps %d bytes of logs; the cap is %d", size, 2<<20)
	}
	l.wantPage("version two")
	if out := c.mustCLI("logs", "hello", "--process", "noise", "--tail", "3"); strings.Count(out, "app[noise r3]: noise") != 3 {
		t.Errorf("the noise's tail:\n%s", out)
	}

	// A guest's follow ends when the guest is deleted, and says so.
	c.mustCLI("guest", "create", "solo", "--image", "busybox", "--memory", "32M")
	g := c.follow("guest", "logs", "solo", "-f")
	time.Sleep(time.Second)
	c.mustCLI("guest", "delete", "solo")
	select {
	case err := <-g.done:
		g.done <- err // for the cleanup
		if err != nil {
			t.Errorf("guest logs -f of a deleted guest: %v", err)
		}
		g.waitLine(t, time.Second, "the guest was deleted")
	case <-time.After(testrun.D(30 * time.Second)):
		t.Error("guest logs -f did not end when the guest was deleted")
	}
}
