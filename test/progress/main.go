// Command progress is how test/run shows a group of tests on the
// console while it runs: it reads the group's test2json events (go test
// -json, or go tool test2json over a test binary) and prints, each line
// behind the group's name, what a newcomer needs to tell a busy run from
// a hung one:
//
//   - every package's result with its time, and every failed test with
//     its own output;
//   - with -tests, every top-level test as it starts and ends (with its
//     time) and the lines it logs (figures, and what it waits for);
//   - every minute in which it printed nothing else, what runs and for
//     how long, with the last line each running test wrote;
//   - when a test binary dies (a panic, -test.timeout), which tests were
//     running and the last lines each of them wrote: what they waited
//     for.
//
// It writes every line of output, as the tests wrote it, to -log; to
// -failures, when anything failed, a short account of it (each failed
// test with the lines its test code logged, each dead binary with what
// ran): test/run prints it again at its end, where a console cut to its
// last lines still shows it. It exits 1 when a test or package failed,
// 0 otherwise.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one test2json record.
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// tail is how many lines of a test's output are kept to show when it
// fails or hangs.
const tail = 40

// test is a running (or finished) test's output.
type test struct {
	name    string
	started time.Time
	lines   []string // the last tail lines
	last    string   // the last line worth showing in a heartbeat
	// own are the last lines the test's code logged, one per place in
	// the code (a helper that logs a daemon's whole log from one line
	// counts once), kept apart from the tail a long dump pushes out.
	// An entry holds its continuation lines too (a command's stdout and
	// stderr a check prints under it), lead and more of them.
	own []string
	// dumps are the daemons' logs the harness dumped ("--- log of
	// NAME ---"), one each, the first dumps of them, kept apart so that
	// they push no check out of own.
	dumps []string
	// cont is the entry the last log line went into (nil: none), so
	// that its continuation lines follow it there.
	cont *string
}

// dumpHead starts the line under which the harness logs a daemon's log.
const dumpHead = "--- log of "

// dumps is how many daemons' logs an account keeps.
const dumps = 4

// lead and more are how many continuation lines of one logged check the
// account keeps: the first lead and the last more.
const lead, more = 4, 12

func (t *test) add(line string) {
	if len(t.lines) == tail {
		t.lines = slices.Delete(t.lines, 0, 1)
	}
	t.lines = append(t.lines, line)
	if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "=== ") && !strings.HasPrefix(s, "--- ") {
		t.last = s
	}
	if isLogLine(line) {
		t.cont = nil
		l := strings.TrimSpace(line)
		at, text, _ := strings.Cut(l, ": ")
		if strings.HasPrefix(text, dumpHead) {
			// An entry grows by its lines: its head names the daemon.
			seen := slices.ContainsFunc(t.dumps, func(d string) bool { return strings.SplitN(d, "\n", 2)[0] == l })
			if len(t.dumps) < dumps && !seen {
				t.dumps = append(t.dumps, l)
				t.cont = &t.dumps[len(t.dumps)-1]
			}
			return
		}
		for _, o := range t.own {
			if strings.HasPrefix(o, at+": ") {
				return
			}
		}
		if len(t.own) == reasons {
			t.own = slices.Delete(t.own, 0, 1)
		}
		t.own = append(t.own, l)
		t.cont = &t.own[len(t.own)-1]
		return
	}
	// go test indents a logged text's further lines by eight spaces.
	if t.cont != nil && strings.HasPrefix(line, "        ") {
		l := strings.TrimSpace(line)
		if l == "SIGQUIT: quit" {
			// A daemon's goroutines follow (the harness asks a failed
			// test's daemons for them): the full output has them.
			t.cont = nil
			return
		}
		// The first lead lines (a command's stdout and stderr) and the
		// last more (a daemon's log dumped under it ends where the
		// check failed).
		last := t.cont
		lines := append(strings.Split(*last, "\n"), "  "+l)
		if len(lines) > 1+lead+more {
			if lines[1+lead] != cutMark {
				lines = slices.Insert(lines, 1+lead, cutMark)
			}
			lines = slices.Delete(lines, 2+lead, len(lines)-more)
		}
		*last = strings.Join(lines, "\n")
		return
	}
	t.cont = nil
}

// cutMark stands for the continuation lines an account left out.
const cutMark = "  …"

type printer struct {
	group   string
	tests   bool // show top-level tests and their log lines
	out     io.Writer
	start   time.Time
	mu      sync.Mutex
	printed time.Time
	every   time.Duration    // the longest it stays silent
	running map[string]*test // "pkg TestName"
	failed  bool
	// panicked holds, per package, the first lines of a dying test
	// binary's panic (kept apart from its tests' own lines).
	panicked map[string][]string
	done     bool // the events ended: no more heartbeats
	// failures is the short account of what failed, in order.
	failures []string
}

// reasons is how many of a failed test's own log lines its account
// keeps: the last, where the failing check usually is.
const reasons = 6

// account adds a failed test to p.failures: its FAIL line, the last
// lines its test code logged, one per place in the code, and the ends of
// the first daemons' logs the harness dumped (the whole logs are in the
// full output above).
func (p *printer) account(head string, t *test) {
	p.failures = append(p.failures, head)
	for _, o := range slices.Concat(t.own, t.dumps) {
		for l := range strings.SplitSeq(o, "\n") {
			p.failures = append(p.failures, "  "+l)
		}
	}
}

func (p *printer) say(format string, args ...any) {
	fmt.Fprintf(p.out, "[%s %s] %s\n", p.group, time.Since(p.start).Round(time.Second), fmt.Sprintf(format, args...))
	p.printed = time.Now()
}

func short(pkg string) string { return strings.TrimPrefix(pkg, "corpus/") }

func (p *printer) handle(e event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := e.Package + " " + e.Test
	top := e.Test != "" && !strings.Contains(e.Test, "/")
	switch e.Action {
	case "run":
		t := &test{name: e.Test, started: time.Now()}
		p.running[key] = t
		if p.tests && top {
			p.say("RUN  %s", e.Test)
		}
	case "output":
		line := strings.TrimRight(e.Output, "\n")
		if pl, dying := p.panicked[e.Package]; dying || strings.HasPrefix(line, "panic: ") {
			if len(pl) < 12 {
				p.panicked[e.Package] = append(pl, line)
			}
			return
		}
		if t := p.running[key]; t != nil {
			t.add(line)
		} else if t := p.running[e.Package+" "]; t != nil {
			t.add(line)
		}
		// A subtest's lines belong to its top-level test too.
		if i := strings.IndexByte(e.Test, '/'); i > 0 {
			if t := p.running[e.Package+" "+e.Test[:i]]; t != nil {
				t.add(line)
			}
		}
		if p.tests && e.Test != "" && isLogLine(line) {
			p.say("     %s: %s", e.Test, strings.TrimSpace(line))
		}
	case "start":
		p.running[e.Package+" "] = &test{started: time.Now()}
	case "pass", "skip":
		t := p.running[key]
		delete(p.running, key)
		switch {
		case e.Test == "":
			p.say("ok   %s (%.1fs)", short(e.Package), e.Elapsed)
		case p.tests && top && e.Action == "pass":
			p.say("PASS %s (%.1fs)", e.Test, e.Elapsed)
		case p.tests && top:
			why := ""
			if t != nil {
				why = t.last
			}
			p.say("SKIP %s: %s", e.Test, why)
		}
	case "fail":
		p.failed = true
		t := p.running[key]
		delete(p.running, key)
		if e.Test != "" {
			p.say("FAIL %s %s (%.1fs)", short(e.Package), e.Test, e.Elapsed)
			if t != nil && top {
				p.dump(t.lines)
				p.account(fmt.Sprintf("FAIL %s %s (%.1fs)", short(e.Package), e.Test, e.Elapsed), t)
			}
			return
		}
		p.say("FAIL %s (%.1fs)", short(e.Package), e.Elapsed)
		pkgLines := 0
		if t != nil {
			pkgLines = len(t.lines)
		}
		// The binary died (a panic, -test.timeout): what each test that
		// was still running last said, then the binary's own last words.
		var hung []*test
		for k, t := range p.running {
			if strings.HasPrefix(k, e.Package+" ") && t.name != "" {
				hung = append(hung, t)
				delete(p.running, k)
			}
		}
		slices.SortFunc(hung, func(a, b *test) int { return strings.Compare(a.name, b.name) })
		for _, t := range hung {
			if !strings.Contains(t.name, "/") {
				p.say("     %s was running for %s; its last lines:", t.name, time.Since(t.started).Round(time.Second))
				p.dump(t.lines)
				p.account(fmt.Sprintf("FAIL %s %s: was running when the test binary died", short(e.Package), t.name), t)
			}
		}
		if len(hung) == 0 && pkgLines > 0 && !p.accounted(e.Package) {
			// Neither a test nor a panic: a build failure, a TestMain's
			// error. Its last lines say which.
			p.failures = append(p.failures, fmt.Sprintf("FAIL %s (%.1fs); its last lines:", short(e.Package), e.Elapsed))
			for _, l := range t.lines[max(0, len(t.lines)-reasons):] {
				p.failures = append(p.failures, "  "+strings.TrimSpace(l))
			}
		}
		for _, l := range p.panicked[e.Package][:min(3, len(p.panicked[e.Package]))] {
			p.failures = append(p.failures, "  "+l)
		}
		p.dump(p.panicked[e.Package])
		delete(p.panicked, e.Package)
	}
}

// accounted says whether a test of pkg is in the account already.
func (p *printer) accounted(pkg string) bool {
	prefix := "FAIL " + short(pkg) + " "
	for _, f := range p.failures {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}

// isLogLine says whether line is one of a test's t.Log lines
// ("    file_test.go:12: text").
func isLogLine(line string) bool {
	f, _, ok := strings.Cut(strings.TrimSpace(line), ": ")
	return ok && strings.Contains(f, "_test.go:") && strings.HasPrefix(line, "    ")
}

func (p *printer) dump(lines []string) {
	for _, l := range lines {
		fmt.Fprintf(p.out, "[%s]   | %s\n", p.group, l)
	}
	p.printed = time.Now()
}

// heartbeat prints, when nothing was printed for a minute, what runs.
func (p *printer) heartbeat(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || now.Sub(p.printed) < p.every {
		return
	}
	var keys []string
	for k := range p.running {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	shown := 0
	for _, k := range keys {
		t := p.running[k]
		if strings.Contains(t.name, "/") {
			continue // its top-level test speaks for it
		}
		pkg, _, _ := strings.Cut(k, " ")
		what := t.name
		if what == "" {
			what = short(pkg)
			if hasTest(p.running, pkg) {
				continue
			}
		}
		line := t.last
		if line == "" {
			line = "(nothing written yet)"
		}
		p.say("...  %s running for %s: %s", what, now.Sub(t.started).Round(time.Second), clip(line, 160))
		shown++
	}
	if shown == 0 {
		p.say("...  building or starting (no test running yet)")
	}
}

func hasTest(running map[string]*test, pkg string) bool {
	for k, t := range running {
		if t.name != "" && strings.HasPrefix(k, pkg+" ") {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run reads events from in and prints the group's lines to out; it
// returns the exit status.
func run(args []string, in io.Reader, out, errs io.Writer) int {
	fs := flag.NewFlagSet("progress", flag.ContinueOnError)
	fs.SetOutput(errs)
	group := fs.String("group", "tests", "the name printed before every line")
	tests := fs.Bool("tests", false, "show every top-level test as it starts and ends, and its log lines")
	logPath := fs.String("log", "", "write every output line here")
	every := fs.Duration("every", time.Minute, "say what runs after this long without a line")
	failuresPath := fs.String("failures", "", "when anything failed, write a short account of it here")
	if err := fs.Parse(args); err != nil {
		return 2
	}

	var log io.Writer = io.Discard
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			fmt.Fprintln(errs, "progress:", err)
			return 2
		}
		defer f.Close()
		w := bufio.NewWriter(f)
		defer w.Flush()
		log = w
	}
	p := &printer{group: *group, tests: *tests, every: *every, out: out, start: time.Now(), printed: time.Now(), running: map[string]*test{}, panicked: map[string][]string{}}
	tick := time.NewTicker(min(10*time.Second, *every/4))
	defer tick.Stop()
	go func() {
		for now := range tick.C {
			p.heartbeat(now)
		}
	}()

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			// Not an event (a build error, say): show it as it is.
			fmt.Fprintln(log, sc.Text())
			p.mu.Lock()
			p.say("%s", sc.Text())
			p.mu.Unlock()
			continue
		}
		if e.Action == "output" {
			io.WriteString(log, e.Output)
		}
		p.handle(e)
	}
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	if err := sc.Err(); err != nil {
		fmt.Fprintln(errs, "progress: reading events:", err)
		return 2
	}
	if !p.failed {
		return 0
	}
	if *failuresPath != "" {
		if len(p.failures) == 0 {
			p.failures = []string{"(no test failed: a package did; see the lines above)"}
		}
		account := ""
		for _, l := range p.failures {
			account += "[" + p.group + "] " + l + "\n"
		}
		if err := os.WriteFile(*failuresPath, []byte(account), 0o644); err != nil {
			fmt.Fprintln(errs, "progress:", err)
		}
	}
	return 1
}
