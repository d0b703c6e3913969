package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"corpus/internal/procfs"
)

// Supervisor runs generations of processes.
type Supervisor struct {
	// StateFile keeps what runs across restarts of the supervisor.
	StateFile string
	// LogDir holds PROJECT/NAME.log per process type.
	LogDir  string
	Version string
	Logger  *slog.Logger

	mu   sync.Mutex
	gens map[string]*generation // project/id → generation
	logs map[string]*logFile    // project/name → its log
	// journal carries every log line out of the guest (OpFollow).
	journal *journal
}

type generation struct {
	spec  Generation
	procs []*proc
}

// savedState is the state file: the generations, and the process groups
// that ran, so a new supervisor ends what an old one left behind.
type savedState struct {
	Generations []Generation `json:"generations"`
	Groups      []group      `json:"groups"`
}

// group is a process group a process led, with its start time (from
// /proc/PID/stat) so a recycled PID is never signalled.
type group struct {
	PID   int    `json:"pid"`
	Start string `json:"start"`
}

func key(project, id string) string { return project + "/" + id }

// Restore ends the process groups an earlier supervisor left running and
// starts the generations of the state file again.
func (s *Supervisor) Restore() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	b, err := os.ReadFile(s.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st savedState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("state file %s: %w", s.StateFile, err)
	}
	for _, g := range st.Groups {
		if procfs.Start(g.PID) == g.Start && g.Start != "" {
			s.Logger.Info("ending a process group an earlier supervisor left", "pgid", g.PID)
			killGroup(g.PID, syscall.SIGTERM)
			time.Sleep(200 * time.Millisecond)
			killGroup(g.PID, syscall.SIGKILL)
		}
	}
	for _, spec := range st.Generations {
		g := s.startLocked(spec)
		s.gens[key(spec.Project, spec.ID)] = g
	}
	return s.saveLocked()
}

func (s *Supervisor) init() {
	if s.gens == nil {
		s.gens = map[string]*generation{}
		s.logs = map[string]*logFile{}
		s.journal = newJournal()
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
}

// Handle answers one request.
func (s *Supervisor) Handle(req Request) Response {
	switch req.Op {
	case OpPing:
		return Response{Version: s.Version}
	case OpStatus:
		return Response{Version: s.Version, Processes: s.status(req.Project)}
	case OpStart:
		if req.Generation == nil {
			return Response{Error: "start without a generation"}
		}
		return s.start(*req.Generation)
	case OpFreePort:
		for _, port := range req.Ports {
			if ln, err := net.Listen("tcp", ":"+strconv.Itoa(port)); err == nil {
				ln.Close()
				return Response{Version: s.Version, Port: port}
			}
		}
		return Response{Error: fmt.Sprintf("every port of %v is in use in the guest", req.Ports)}
	case OpReady:
		if req.Project == "" || req.ID == "" {
			return Response{Error: "ready without a project and a generation"}
		}
		if !s.ready(req.Project, req.ID, req.Names) {
			return Response{Error: fmt.Sprintf("no generation %s of %s runs", req.ID, req.Project)}
		}
		return Response{Version: s.Version}
	case OpStop:
		if req.Project == "" {
			return Response{Error: "stop without a project"}
		}
		s.stop(req.Project, req.ID, req.Names)
		return Response{Version: s.Version, Processes: s.status(req.Project)}
	}
	return Response{Error: fmt.Sprintf("unknown operation %q", req.Op)}
}

func checkGeneration(g Generation) error {
	switch {
	case g.Project == "" || g.ID == "" || strings.ContainsAny(g.Project+g.ID, "/\x00"):
		return errors.New("a generation needs a project and an id without slashes")
	case !filepath.IsAbs(g.Dir):
		return fmt.Errorf("directory %q is not absolute", g.Dir)
	case len(g.Processes) == 0:
		return errors.New("a generation without processes")
	}
	names := map[string]bool{}
	for _, p := range g.Processes {
		if p.Name == "" || strings.ContainsAny(p.Name, "/\x00 ") || names[p.Name] {
			return fmt.Errorf("process name %q is empty, not a plain name, or given twice", p.Name)
		}
		if strings.TrimSpace(p.Command) == "" {
			return fmt.Errorf("process %s has no command", p.Name)
		}
		if p.StopSignal < 0 || p.StopSignal > 64 {
			return fmt.Errorf("process %s: stop signal %d is not a signal (1 to 64)", p.Name, p.StopSignal)
		}
		names[p.Name] = true
	}
	return nil
}

// start runs a generation and waits MinUptime: a process that exits
// within it fails the start, which then stops the whole generation.
func (s *Supervisor) start(spec Generation) Response {
	if err := checkGeneration(spec); err != nil {
		return Response{Error: err.Error()}
	}
	s.mu.Lock()
	s.init()
	k := key(spec.Project, spec.ID)
	if old, ok := s.gens[k]; ok {
		same := specJSON(old.spec) == specJSON(spec)
		s.mu.Unlock()
		if same {
			return Response{Version: s.Version, Processes: s.status(spec.Project)}
		}
		return Response{Error: fmt.Sprintf("generation %s of %s runs already with another spec; stop it first", spec.ID, spec.Project)}
	}
	g := s.startLocked(spec)
	s.gens[k] = g
	procs := g.procs // a stop of some of them replaces the slice
	if err := s.saveLocked(); err != nil {
		s.Logger.Warn("saving state", "error", err)
	}
	s.mu.Unlock()

	if p, last, tail := settle(spec.ID, procs, time.Duration(spec.MinUptime)); p != nil {
		s.stop(spec.Project, spec.ID, nil)
		if last == "" {
			last = "it did not start"
		}
		return Response{
			Error:  fmt.Sprintf("process %s exited within %s of its start (%s)", p.spec.Name, time.Duration(spec.MinUptime), last),
			Output: tail,
		}
	}
	return Response{Version: s.Version, Processes: s.status(spec.Project)}
}

// settleTick is how often a start looks at its processes while they
// settle.
const settleTick = 10 * time.Millisecond

// settle waits until every process of procs is marked ready or has been
// up minUptime, and returns the first one that exited meanwhile, or was
// still not running at the end (nil when none), with its last exit and
// output.
func settle(id string, procs []*proc, minUptime time.Duration) (failed *proc, last string, tail []string) {
	deadline := time.Now().Add(minUptime)
	for {
		over := !time.Now().Before(deadline)
		waiting := false
		for _, p := range procs {
			p.mu.Lock()
			exited := p.restarts > 0 || p.lastExit != "" || (p.state != StateStarting && p.state != StateRunning)
			late := over && !p.ready && p.state != StateRunning
			ready, last := p.ready, p.lastExit
			p.mu.Unlock()
			if exited || late {
				return p, last, p.log.tail(id, p.spec.Name)
			}
			waiting = waiting || !ready
		}
		if !waiting || over {
			return nil, "", nil
		}
		time.Sleep(min(settleTick, time.Until(deadline)))
	}
}

// ready marks the processes names (all when empty) of a generation
// ready; false when no such generation runs.
func (s *Supervisor) ready(project, id string, names []string) bool {
	s.mu.Lock()
	s.init()
	g, ok := s.gens[key(project, id)]
	var procs []*proc
	if ok {
		procs = g.procs // a stop of some of them replaces the slice
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	for _, p := range procs {
		if len(names) == 0 || slices.Contains(names, p.spec.Name) {
			p.mu.Lock()
			p.ready = true
			p.mu.Unlock()
		}
	}
	return true
}

func specJSON(g Generation) string {
	b, _ := json.Marshal(g)
	return string(b)
}

func (s *Supervisor) startLocked(spec Generation) *generation {
	g := &generation{spec: spec}
	for _, ps := range spec.Processes {
		lk := spec.Project + "/" + ps.Name
		lf := s.logs[lk]
		if lf == nil {
			lf = &logFile{path: filepath.Join(s.LogDir, spec.Project, ps.Name+".log"), project: spec.Project, journal: s.journal}
			s.logs[lk] = lf
		}
		p := &proc{s: s, gen: spec, spec: ps, log: lf, stopCh: make(chan struct{}), done: make(chan struct{}), state: StateStarting}
		g.procs = append(g.procs, p)
		go p.loop()
	}
	return g
}

// stop ends a project's generation id (every one when id is empty), or
// only the processes named, and waits for them.
func (s *Supervisor) stop(project, id string, names []string) {
	s.mu.Lock()
	s.init()
	var procs []*proc
	for k, g := range s.gens {
		if g.spec.Project != project || (id != "" && g.spec.ID != id) {
			continue
		}
		var keep []*proc
		var keepSpec []Process
		for i, p := range g.procs {
			if len(names) == 0 || slices.Contains(names, p.spec.Name) {
				procs = append(procs, p)
			} else {
				keep = append(keep, p)
				keepSpec = append(keepSpec, g.spec.Processes[i])
			}
		}
		if len(keep) == 0 {
			delete(s.gens, k)
		} else {
			g.procs, g.spec.Processes = keep, keepSpec
		}
	}
	if err := s.saveLocked(); err != nil {
		s.Logger.Warn("saving state", "error", err)
	}
	s.mu.Unlock()
	stopAll(procs)
}

// StopAll ends every process (the supervisor is going away).
func (s *Supervisor) StopAll() {
	s.mu.Lock()
	var procs []*proc
	for _, g := range s.gens {
		procs = append(procs, g.procs...)
	}
	s.mu.Unlock()
	stopAll(procs)
}

// stopAll stops processes side by side and waits for them all.
func stopAll(procs []*proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	wg.Wait()
}

func (s *Supervisor) status(project string) []Status {
	s.mu.Lock()
	var procs []*proc
	for _, g := range s.gens {
		if project == "" || g.spec.Project == project {
			procs = append(procs, g.procs...)
		}
	}
	s.mu.Unlock()
	out := make([]Status, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.status())
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Project != b.Project {
			return a.Project < b.Project
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Generation < b.Generation
	})
	return out
}

// saveLocked writes the state file: the generations and the live groups.
func (s *Supervisor) saveLocked() error {
	st := savedState{Generations: []Generation{}, Groups: []group{}}
	keys := make([]string, 0, len(s.gens))
	for k := range s.gens {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := s.gens[k]
		st.Generations = append(st.Generations, g.spec)
		for _, p := range g.procs {
			if pid, start := p.group(); pid > 0 {
				st.Groups = append(st.Groups, group{PID: pid, Start: start})
			}
		}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.StateFile), 0o700); err != nil {
		return err
	}
	tmp := s.StateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.StateFile)
}

// saved is called by a process that started or ended, so the state file
// knows its group.
func (s *Supervisor) saved() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.saveLocked(); err != nil {
		s.Logger.Warn("saving state", "error", err)
	}
}

func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 1 {
		syscall.Kill(-pgid, sig)
	}
}
