package robustness

import (
	"fmt"
	"maps"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// resultsTable is the Markdown report of a set of runs.
func resultsTable(results []runResult, faultsPerRun int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Robustness results\n\n")
	fmt.Fprintf(&b, "`make robustness RUNS=%d` on %s: %d CPUs, %s, corpus %s; %d faults per run; %s in all.\n\n",
		len(results), time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), builtFrom, faultsPerRun, took.Round(time.Second))
	b.WriteString("Three coordinator replicas, each in its own network namespace, linked through a routing namespace where partitions are iptables rules; " +
		"six clients add DNS records and guests (create-once), create and delete other guests, write an environment's config keys, and read all of it back linearizably (`Corpus-Consistency: linearizable`) through any replica; " +
		"a node enrolled with a join token and a CSR (the lab speaks for its agent, with its certificate) reports its guest every 100 ms and records deploys one after another (BeginRelease, FinishRelease, each asked again until answered). " +
		"Histories checked with porcupine per key (objects added and deleted; config keys, the guest's observed state and the current release as registers); acknowledged adds of the create-once keys and releases read back from every replica after the last heal; guests' dates must follow their Raft order, release numbers the order deploys began in; the node must never be marked down. " +
		"Recovery: from the fault being in place to the first acknowledged write sent after it by a prober (one per replica, a write every 20 ms, 1 s timeout).\n\n")
	var (
		ops, unknown, reads, lost, bad, problems int
		byKind                                   = map[string][]faultEvent{}
		kinds                                    = map[string][2]int{}
	)
	for _, r := range results {
		for k, c := range r.byKind {
			kinds[k] = [2]int{kinds[k][0] + c[0], kinds[k][1] + c[1]}
		}
		ops += r.ops
		unknown += r.unknown
		reads += r.reads
		lost += len(r.lost)
		if r.linearizable != porcupine.Ok {
			bad++
		}
		if r.problem != "" {
			problems++
		}
		for _, f := range r.faults {
			byKind[f.kind] = append(byKind[f.kind], f)
		}
	}
	b.WriteString("| runs | faults | operations | reads | unknown outcome | linearizable | acknowledged writes lost | runs that did not recover |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---|---:|---:|\n")
	lin := "yes, every run"
	if bad > 0 {
		lin = fmt.Sprintf("**no, %d runs**", bad)
	}
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %s | %d | %d |\n\n", len(results), len(results)*faultsPerRun, ops, reads, unknown, lin, lost, problems)

	b.WriteString("| operations on | all | reads among them |\n|---|---:|---:|\n")
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", keyKinds[k], kinds[k][0], kinds[k][1])
	}
	b.WriteString("\n")

	b.WriteString("## Per fault kind\n\n| fault | times | recovery median | recovery max | never recovered in hold + 10 s | replicas crashed | log lines \"no space left\" |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range faultKinds {
		evs := byKind[k.name]
		if len(evs) == 0 {
			fmt.Fprintf(&b, "| %s | 0 | | | | | |\n", k.name)
			continue
		}
		var rec []time.Duration
		never, crashed, enospc := 0, 0, 0
		for _, e := range evs {
			crashed += len(e.crashed)
			enospc += e.enospc
			if e.recovered < 0 {
				never++
				continue
			}
			rec = append(rec, e.recovered)
		}
		slices.Sort(rec)
		med, worst := "", ""
		if len(rec) > 0 {
			med, worst = ms(rec[len(rec)/2]), ms(rec[len(rec)-1])
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %d | %d |\n", k.name, len(evs), med, worst, never, crashed, enospc)
	}
	b.WriteString("\n## Runs\n\n| seed | faults (leader at the time) | operations | unknown | linearizable | lost | time |\n|---:|---|---:|---:|---|---:|---:|\n")
	for _, r := range results {
		var fs []string
		for _, f := range r.faults {
			s := fmt.Sprintf("%s (%s, %s)", f.kind, f.leader, f.held.Round(100*time.Millisecond))
			if len(f.crashed) > 0 {
				s += fmt.Sprintf(" crashed %v", f.crashed)
			}
			fs = append(fs, s)
		}
		linText := "yes"
		if r.linearizable != porcupine.Ok {
			linText = "**" + string(r.linearizable) + "**"
		}
		if r.problem != "" {
			linText += "; " + r.problem
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %d | %s | %d | %s |\n", r.seed, strings.Join(fs, "; "), r.ops, r.unknown, linText, len(r.lost), r.took.Round(time.Second))
	}
	return b.String()
}

// keyKinds says what each kind of key in a history stands for.
var keyKinds = map[string]string{
	"dns":      "DNS records (create-once; probers' included)",
	"guest":    "guests (create-once)",
	"gdel":     "guests created and deleted",
	"config":   "config keys (registers)",
	"observed": "the node's guest's observed state (heartbeats; a register)",
	"release":  "releases begun (deploys)",
	"current":  "the current release (deploys finished; a register)",
}

// builtFrom names the tree the runs' binary was built from: read when the
// test process starts, just before TestMain builds it (the tree may
// change while long runs go on).
var builtFrom = commit()

func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
