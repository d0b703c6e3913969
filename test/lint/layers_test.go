package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the repository's root (go.mod).
const module = "corpus"

// layers are DESIGN.md's layering rules ("Operating it for years (round
// three)"). Patterns are folders relative to the repository's root:
// "agent/..." is agent and every package below it, "drivers" the one
// package. A rule holds over the non-test files of the packages it is
// about.
var layers = []struct {
	// in: the packages the rule is about; but: those of them it spares.
	in, but []string
	// only: the packages of the module they may import (none of the
	// others); deny: those they may not import (all the others), save
	// those in allow.
	only, deny, allow []string
	why               string
}{
	{
		in:   []string{"cmd/corpus/cli"},
		only: []string{"client/...", "proto/...", "internal/..."},
		why:  "client commands reach the cluster through package client and the API alone; commands that wire components go in cmd/corpus/daemon",
	},
	{
		in:   []string{"client/..."},
		only: []string{"proto/...", "internal/..."},
		why:  "package client is what any program needs to call a cluster: the API's messages and small helpers, no server code",
	},
	{
		in:   []string{"internal/...", "proto/...", "drivers", "client/..."},
		deny: []string{"coordinator/...", "agent/...", "cmd/..."},
		why:  "leaf packages are imported from everywhere, so they import nothing above them",
	},
	{
		in:   []string{"coordinator/fit/..."},
		only: []string{"proto/...", "internal/...", "coordinator/idrange"},
		why:  "feasibility is one leaf package the scheduler and the state machine both call",
	},
	{
		in:   []string{"agent/..."},
		deny: []string{"coordinator/..."},
		why:  "the agent talks to the coordinator over the API (proto/), never by linking its code",
	},
	{
		in:   []string{"agent/..."},
		but:  []string{"agent"},
		deny: []string{"agent"},
		why:  "the agent's subsystems are wired together by the agent root, which they never import",
	},
	{
		in:   []string{"..."},
		but:  []string{"drivers/fakedriver"},
		deny: []string{"drivers/fakedriver"},
		why:  "the fake driver is for tests: no program runs guests on it",
	},
	{
		in:   []string{"..."},
		but:  []string{"cmd/..."},
		deny: []string{"cmd/..."},
		why:  "cmd/ only wires the binary; what another package needs lives in an importable package",
	},
	{
		// A new leader loop's package goes on this list.
		in: []string{"coordinator/api/..."},
		deny: []string{"coordinator", "coordinator/leader/...", "coordinator/scheduler/...", "coordinator/autoscale/...",
			"coordinator/series/...", "coordinator/acme/...", "coordinator/backupschedule/...", "coordinator/snapshotschedule/...", "coordinator/carotation/..."},
		why: "handlers only answer calls; leader loops run beside them under the leader runner, and a handler reads what a loop knows through an interface of Backend",
	},
	{
		in:    []string{"coordinator/api/..."},
		but:   []string{"coordinator/api/serve"},
		deny:  []string{"coordinator/api/..."},
		allow: []string{"coordinator/api", "coordinator/api/backups"},
		why:   "a handler package answers the calls of its noun; what handlers share is in coordinator/api (the backups services and volumes keep: coordinator/api/backups), and package serve alone joins them",
	},
	{
		in: []string{"coordinator/state/..."},
		deny: []string{"coordinator", "coordinator/api/...", "coordinator/leader/...", "coordinator/scheduler/...", "coordinator/autoscale/...",
			"coordinator/series/...", "coordinator/backupschedule/...", "coordinator/snapshotschedule/..."},
		why: "the state machine is below the handlers and the loops: they propose, it applies",
	},
}

// knownImports are the imports that break a rule today, each to be
// removed by the change that moves it (issue 38: coordinator/api keeps
// only its handlers, the leader loops go to their own packages).
var knownImports = map[string]bool{
	"coordinator/api -> coordinator/acme": true,
	// Why a node's guest waits (nodes, DrainStatus).
	"coordinator/api/nodes -> coordinator/scheduler": true,
}

// badNames are grab-bag package names (STYLE.md): a package is named for
// what it is for.
var badNames = map[string]bool{"util": true, "utils": true, "common": true, "misc": true, "helpers": true}

const (
	maxFileLines    = 800
	maxPackageLines = 4000
)

// bigPackages may hold more than maxPackageLines of non-test code.
var bigPackages = map[string]string{
	// The command tree: one flat list of commands, a file per noun.
	"cmd/corpus/cli": "the CLI's command tree",
}

// goPackage is one folder of non-test Go files.
type goPackage struct {
	names   map[string]bool     // package clauses
	imports map[string][]string // module-relative import -> files importing it
	files   map[string]int      // hand-written file -> lines
}

// walkGo calls f with every Go file below root, leaving out hidden
// folders, build output, test data and node modules.
func walkGo(root string, f func(path string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (strings.HasPrefix(n, ".") || n == "bin" || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		return f(path)
	})
}

// readTree parses every non-test Go file below root.
func readTree(t *testing.T, root string) map[string]*goPackage {
	t.Helper()
	pkgs := map[string]*goPackage{}
	err := walkGo(root, func(path string) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		p := pkgs[dir]
		if p == nil {
			p = &goPackage{names: map[string]bool{}, imports: map[string][]string{}, files: map[string]int{}}
			pkgs[dir] = p
		}
		p.names[f.Name.Name] = true
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			if ip == module || strings.HasPrefix(ip, module+"/") {
				ip = strings.TrimPrefix(strings.TrimPrefix(ip, module), "/")
				if ip == "" {
					ip = "."
				}
				p.imports[ip] = append(p.imports[ip], filepath.ToSlash(rel))
			}
		}
		if !ast.IsGenerated(f) {
			p.files[filepath.ToSlash(rel)] = strings.Count(string(src), "\n")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pkgs["cmd/corpus/cli"] == nil || len(pkgs) < 20 {
		t.Fatalf("found %d packages and no cmd/corpus/cli; is the walk rooted right?", len(pkgs))
	}
	return pkgs
}

// matches says whether pkg is pattern, or below it for "dir/...".
func matches(pkg string, patterns []string) bool {
	for _, p := range patterns {
		if p == "..." {
			return true
		}
		if base, ok := strings.CutSuffix(p, "/..."); ok {
			if pkg == base || strings.HasPrefix(pkg, base+"/") {
				return true
			}
		} else if pkg == p {
			return true
		}
	}
	return false
}

// layerFaults lists each import that breaks a rule of layers, naming the
// file, the import and the reason.
func layerFaults(pkgs map[string]*goPackage) []string {
	var faults []string
	for dir, p := range pkgs {
		for _, r := range layers {
			if !matches(dir, r.in) || matches(dir, r.but) {
				continue
			}
			for im, files := range p.imports {
				if im == dir || knownImports[dir+" -> "+im] {
					continue
				}
				if (r.only != nil && !matches(im, r.only)) || (matches(im, r.deny) && !matches(im, r.allow)) {
					faults = append(faults, fmt.Sprintf("%s imports %s/%s: %s", files[0], module, im, r.why))
				}
			}
		}
		for n := range p.names {
			if badNames[n] || badNames[filepath.Base(dir)] {
				faults = append(faults, fmt.Sprintf("package %s (%s) is a grab-bag name: name a package for what it is for", n, dir))
			}
		}
	}
	sort.Strings(faults)
	return faults
}

// sizeFaults lists each hand-written file over maxFileLines and each
// package over maxPackageLines that is not in bigPackages, and each
// package in bigPackages that no longer needs to be.
func sizeFaults(pkgs map[string]*goPackage) []string {
	var faults []string
	for dir, p := range pkgs {
		sum := 0
		for f, n := range p.files {
			sum += n
			if n > maxFileLines {
				faults = append(faults, fmt.Sprintf("%s has %d lines, over %d: split it by concern", f, n, maxFileLines))
			}
		}
		_, big := bigPackages[dir]
		switch {
		case sum > maxPackageLines && !big:
			faults = append(faults, fmt.Sprintf("package %s has %d lines of non-test code, over %d: split a concern into a package of its own", dir, sum, maxPackageLines))
		case sum <= maxPackageLines && big:
			faults = append(faults, fmt.Sprintf("package %s has %d lines of non-test code, within %d: take it off bigPackages", dir, sum, maxPackageLines))
		}
	}
	for dir := range bigPackages {
		if pkgs[dir] == nil {
			faults = append(faults, fmt.Sprintf("package %s is gone: take it off bigPackages", dir))
		}
	}
	sort.Strings(faults)
	return faults
}

// testFileLines counts the lines of every test file below root (tests
// are code to read too: the file limit holds for them).
func testFileLines(t *testing.T, root string) map[string]int {
	t.Helper()
	lines := map[string]int{}
	err := walkGo(root, func(path string) error {
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		lines[filepath.ToSlash(rel)] = strings.Count(string(src), "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestLayers: every import keeps DESIGN.md's layers, no package has a
// grab-bag name, and files and packages keep within their sizes.
func TestLayers(t *testing.T) {
	pkgs := readTree(t, filepath.Join("..", ".."))
	for _, f := range layerFaults(pkgs) {
		t.Error(f)
	}
	for _, f := range sizeFaults(pkgs) {
		t.Error(f)
	}
	for f, n := range testFileLines(t, filepath.Join("..", "..")) {
		if n > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it by concern", f, n, maxFileLines)
		}
	}
	for k := range knownImports {
		from, to, _ := strings.Cut(k, " -> ")
		if p := pkgs[from]; p == nil || p.imports[to] == nil {
			t.Errorf("%s no longer imports %s: take it off knownImports", from, to)
		}
	}
}

// TestLayerFaults: the checks find what breaks a rule in a made-up tree.
func TestLayerFaults(t *testing.T) {
	pkg := func(name string, lines map[string]int, imports ...string) *goPackage {
		p := &goPackage{names: map[string]bool{name: true}, imports: map[string][]string{}, files: lines}
		for _, im := range imports {
			p.imports[im] = []string{name + "/x.go"}
		}
		return p
	}
	// A listed big package the made-up tree lacks (the real list
	// shrinks as packages are split).
	bigPackages["agent/gone"] = "made up"
	t.Cleanup(func() { delete(bigPackages, "agent/gone") })
	// A listed big package within the limit.
	bigPackages["coordinator/api"] = "made up"
	t.Cleanup(func() { delete(bigPackages, "coordinator/api") })
	pkgs := map[string]*goPackage{
		"cmd/corpus/cli":    pkg("cli", map[string]int{"c.go": 4101}, "client", "coordinator/state"),
		"agent/network":     pkg("network", nil, "agent"),
		"client":            pkg("client", nil, "proto/corpus/v1", "agent/cache"),
		"agent/deploy":      pkg("deploy", nil, "coordinator"),
		"internal/names":    pkg("names", nil, "cmd/corpus/cli"),
		"coordinator/api":   pkg("api", map[string]int{"a.go": 10}, "coordinator/acme", "coordinator/leader", "coordinator/backupschedule"),
		"coordinator/state": pkg("state", map[string]int{"a.go": 801, "b.go": 3000}),
		"coordinator/util":  pkg("util", map[string]int{"a.go": 10}),
	}
	pkgs["coordinator/api/services"] = pkg("services", nil, "coordinator/api", "coordinator/api/backups", "coordinator/api/projects")
	got := strings.Join(append(layerFaults(pkgs), sizeFaults(pkgs)...), "\n")
	for _, want := range []string{
		"cli/x.go imports corpus/coordinator/state: client commands",
		"client/x.go imports corpus/agent/cache: package client",
		"deploy/x.go imports corpus/coordinator: the agent talks",
		"names/x.go imports corpus/cmd/corpus/cli: leaf packages",
		"names/x.go imports corpus/cmd/corpus/cli: cmd/ only wires",
		"api/x.go imports corpus/coordinator/leader: handlers only answer",
		"api/x.go imports corpus/coordinator/backupschedule: handlers only answer",
		"services/x.go imports corpus/coordinator/api/projects: a handler package answers",
		"package util (coordinator/util) is a grab-bag name",
		"a.go has 801 lines, over 800",
		"package coordinator/api has 10 lines of non-test code, within 4000: take it off",
		"package agent/gone is gone: take it off bigPackages",
		"network/x.go imports corpus/agent: the agent's subsystems",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("faults lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "imports corpus/coordinator/api:") || strings.Contains(got, "imports corpus/coordinator/api/backups:") {
		t.Errorf("faults name an import of the handlers' shared plumbing:\n%s", got)
	}
	if strings.Contains(got, "coordinator/acme") || strings.Contains(got, "package coordinator/state") || strings.Contains(got, "package cmd/corpus/cli") {
		t.Errorf("faults name a known import or a listed big package:\n%s", got)
	}
}
