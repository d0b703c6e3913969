package proxyd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"corpus/internal/atomicfile"
	"corpus/internal/metrics"
	"corpus/internal/revert"
	"corpus/netns/listen"
	"corpus/netns/proxy"
)

// Files of a proxy's folder.
const (
	controlSock  = "control.sock"
	handoverSock = "handover.sock"
	routesFile   = "routes.json"
	pidFile      = "proxy.pid"
	logFile      = "proxy.log"
)

func sockPath(dir, name string) string { return filepath.Join(dir, name) }

// DefaultDrainTimeout is how long connections get to finish on a proxy
// that stops (or hands over), unless Config says.
const DefaultDrainTimeout = 5 * time.Minute

// Config configures a proxy process.
type Config struct {
	// Dir is the proxy's folder (sockets, routes, pid).
	Dir string
	// Proxy configures the proxy itself; its Inherited, Logger and
	// Metrics are set by Run.
	Proxy proxy.Config
	// Takeover takes the listeners and routes of the proxy serving Dir
	// (binding anew when none answers).
	Takeover bool
	// Version is this binary's, for Status.
	Version string
	// DrainTimeout bounds how long connections get to finish when this
	// process stops or hands over (DefaultDrainTimeout when 0).
	DrainTimeout time.Duration
	// Logger receives the logs (nil discards them).
	Logger *slog.Logger
	// Ready is called once the proxy serves (nil: nothing).
	Ready func()
	// Report, when set, is told once how the start went (a startReport:
	// serving, or why not), then closed: the agent that started this
	// process learns why it could not start (a port in use, and by
	// whom) from it rather than from the log.
	Report io.WriteCloser
}

// startReport is what a proxy process tells the agent that started it
// on its report pipe, as one line of JSON: that it serves, or why it
// cannot. V is the format's version.
type startReport struct {
	V       int           `json:"v"`
	Serving bool          `json:"serving,omitempty"`
	Error   string        `json:"error,omitempty"`
	Listen  *listen.Error `json:"listen,omitempty"`
}

// reportStart tells w how the start went (err nil: serving) and closes it.
func reportStart(w io.WriteCloser, err error) {
	r := startReport{V: 1, Serving: err == nil}
	if err != nil {
		r.Error = err.Error()
		errors.As(err, &r.Listen)
	}
	json.NewEncoder(w).Encode(r) // a reader that went away has nothing to learn
	w.Close()
}

// Status is what GET /status answers.
type Status struct {
	// ID names this process's run (a pid may be reused).
	ID        string `json:"id"`
	PID       int    `json:"pid"`
	Version   string `json:"version"`
	HTTPAddr  string `json:"http_addr"`
	HTTPSAddr string `json:"https_addr,omitempty"`
	Routes    int    `json:"routes"`
	Started   string `json:"started"`
	// Config fingerprints the listen addresses and certificates it serves
	// with (see Fingerprint): a client wanting others replaces it.
	Config string `json:"config"`
}

// Fingerprint names what a proxy serves with: its listen addresses and
// its certificates (leaves).
func Fingerprint(pc proxy.Config, leaves []*x509.Certificate) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", pc.HTTPAddr, pc.HTTPSAddr, pc.TCPHost)
	for _, l := range leaves {
		h.Write(l.Raw)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Run serves a proxy until ctx ends (then it drains) or a successor took
// its listeners over (then it drains too, the successor serving).
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.Report != nil {
		// Once: at the first serve, or with the error that ended the start.
		report := cfg.Report
		cfg.Report = nil
		var once sync.Once
		tell := func(err error) { once.Do(func() { reportStart(report, err) }) }
		defer func() { tell(err) }()
		ready := cfg.Ready
		cfg.Ready = func() {
			tell(nil)
			if ready != nil {
				ready()
			}
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return err
	}
	routes, err := loadRoutes(cfg.Dir)
	if err != nil {
		log.Warn("the routes kept from before cannot be read; starting with none", "error", err)
	}
	var pred *net.UnixConn
	if cfg.Takeover {
		var lns map[string]net.Listener
		var got proxy.Routes
		pred, lns, got, err = takeOver(cfg.Dir)
		switch {
		case errors.Is(err, errNoPredecessor):
			log.Info("no proxy running to take over from: binding anew", "error", err)
		case err != nil:
			return err
		default:
			cfg.Proxy.Inherited, routes = lns, got
			log.Info("took over the listeners of the running proxy", "listeners", len(lns))
		}
	}
	// Until it serves, a failure closes what it made and leaves a
	// predecessor serving on.
	r := revert.New()
	defer r.Fail()
	if pred != nil {
		r.Add(func() { pred.Close() })
	}
	reg := metrics.NewRegistry()
	cfg.Proxy.Logger, cfg.Proxy.Metrics = log, reg
	cfg.Proxy.ShutdownTimeout = cfg.DrainTimeout
	p, err := proxy.New(cfg.Proxy)
	if err != nil {
		return err
	}
	r.Add(func() { p.Close() })
	if err := p.SetRoutes(routes); err != nil {
		log.Warn("setting the kept routes", "error", err)
	}
	s := &server{cfg: cfg, log: log, p: p, reg: reg, started: time.Now(), id: rand.Text(), successor: make(chan struct{})}
	ctl, err := listenUnix(sockPath(cfg.Dir, controlSock))
	if err != nil {
		return err
	}
	r.Add(func() { ctl.Close() })
	ho, err := listenUnix(sockPath(cfg.Dir, handoverSock))
	if err != nil {
		return err
	}
	r.Success()
	if err := atomicfile.Write(filepath.Join(cfg.Dir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		log.Warn("writing the pid file", "error", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(runCtx) }()
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ctl)
	go s.serveHandover(ho)
	if pred != nil {
		if _, err := pred.Write([]byte("ready\n")); err != nil {
			log.Warn("telling the old proxy it can go", "error", err)
		}
		pred.Close()
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	log.Info("proxy process serving", "pid", os.Getpid(), "dir", cfg.Dir, "version", cfg.Version)

	var result error
	select {
	case <-ctx.Done():
		log.Info("stopping: draining connections", "drain_timeout", cfg.DrainTimeout)
	case <-s.successor:
		log.Info("a successor serves now: draining connections", "drain_timeout", cfg.DrainTimeout)
	case result = <-runErr:
		log.Error("the proxy stopped", "error", result)
	}
	// The sockets' paths are the successor's now, or are left for the
	// next process (a client finding nobody there starts one).
	ctl.Close()
	ho.Close()
	srv.Close()
	stop()
	if result == nil {
		result = <-runErr
	}
	log.Info("proxy process stopped")
	return result
}

// listenUnix listens on a unix socket at path, replacing whatever file is
// there (a predecessor's socket stays open in that predecessor), and
// never removes the path when closed.
func listenUnix(path string) (*net.UnixListener, error) {
	tmp := path + ".new"
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	// A rename swaps the path at once: a client always finds a socket.
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

type server struct {
	cfg     Config
	log     *slog.Logger
	p       *proxy.Proxy
	reg     *prometheus.Registry
	started time.Time
	id      string

	mu        sync.Mutex
	handed    bool
	successor chan struct{} // closed once a successor serves
}

// serveHandover answers successors, one at a time, until one takes over.
func (s *server) serveHandover(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		ok, err := giveListeners(c, s.p)
		c.Close()
		if !ok {
			s.log.Warn("a handover did not complete; serving on", "error", err)
			continue
		}
		s.mu.Lock()
		if !s.handed {
			s.handed = true
			close(s.successor)
		}
		s.mu.Unlock()
		return
	}
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := Status{ID: s.id, PID: os.Getpid(), Version: s.cfg.Version, HTTPAddr: s.p.HTTPAddr().String(), Started: s.started.UTC().Format(time.RFC3339),
			Config: Fingerprint(s.cfg.Proxy, s.p.Certificates())}
		if a := s.p.HTTPSAddr(); a != nil {
			st.HTTPSAddr = a.String()
		}
		rt := s.p.Routes()
		st.Routes = len(rt.HTTP) + len(rt.TCP)
		writeJSON(w, st)
	})
	mux.HandleFunc("GET /routes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.p.Routes().WithoutKeys())
	})
	mux.HandleFunc("PUT /routes", func(w http.ResponseWriter, r *http.Request) {
		var rt proxy.Routes
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&rt); err != nil {
			http.Error(w, "routes: "+err.Error(), http.StatusBadRequest)
			return
		}
		err := s.p.SetRoutes(rt)
		if err != nil && !errors.Is(err, proxy.ErrListen) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if werr := saveRoutes(s.cfg.Dir, s.p.Routes()); werr != nil {
			s.log.Warn("keeping the routes", "error", werr)
		}
		if err != nil {
			// In force but for ports that could not be listened on.
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.p.Requests())
	})
	mux.HandleFunc("GET /errors", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.p.Errors())
	})
	mux.HandleFunc("GET /inflight", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.p.InFlight(r.URL.Query().Get("target")))
	})
	mux.Handle("GET /metrics", metrics.Handler(s.reg, s.log))
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func loadRoutes(dir string) (proxy.Routes, error) {
	var r proxy.Routes
	b, err := os.ReadFile(filepath.Join(dir, routesFile))
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return proxy.Routes{}, fmt.Errorf("%s: %w", routesFile, err)
	}
	return r, nil
}

// saveRoutes keeps the routes for the next process, without their TLS
// material: keys stay in memory (a successor gets them in the handover;
// after a restart the agent gives them again).
func saveRoutes(dir string, r proxy.Routes) error {
	b, err := json.Marshal(r.WithoutKeys())
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, routesFile), b, 0o600)
}

// CloseInheritedFiles closes the descriptors above stderr that this
// process inherited from its parent: those without close-on-exec (Go
// opens every one of its own with it). An agent's C libraries (liblxc)
// open some without it, and a proxy process, which outlives the agent,
// would otherwise keep a guest's loop device or mount busy.
func CloseInheritedFiles() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// ReleaseMounts lets go of the mounts below the agent's state folder (the
// parent of dir) that dir is not under: guests' volumes and disks. It
// acts only in a mount namespace other than its parent process's (the
// private copy an agent starts it in) and refuses otherwise, so it never
// unmounts anything the agent uses.
func ReleaseMounts(dir string) error {
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err == nil && parent == own {
		return errors.New("not in a mount namespace of its own: nothing released")
	}
	dir = filepath.Clean(dir)
	state := filepath.Dir(dir)
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if strings.HasPrefix(mp, state+"/") && mp != dir && !strings.HasPrefix(dir+"/", mp+"/") {
			points = append(points, mp)
		}
	}
	// The deepest first.
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}
