package proxyd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"corpus/netns/proxy"
)

// ClientConfig configures the agent's side of a proxy process.
type ClientConfig struct {
	// Dir is the proxy's folder.
	Dir string
	// Binary and Args start a proxy process: Binary Args... (the corpus
	// binary and its `proxy` command with the agent's proxy settings).
	// The client adds --takeover when it replaces a running one.
	Binary string
	Args   []string
	// Version is the agent's; a proxy process of another version is
	// replaced (taken over) by one of this binary.
	Version string
	// HTTPAddr and HTTPSAddr are the addresses the proxy listens on (for
	// the node's reserved ports before it answers); a proxy serving other
	// addresses or certificates is replaced.
	HTTPAddr, HTTPSAddr string
	// Certs are the HTTPS certificates' files, for their expiry metric.
	Certs []proxy.CertFiles
	// CheckEvery is how often Run checks on the process (2 s when 0).
	CheckEvery time.Duration
	Logger     *slog.Logger
}

// startTimeout bounds the wait for a started proxy process to answer.
const startTimeout = 15 * time.Second

// Client talks to the proxy process over its control socket; it is safe
// for concurrent use.
type Client struct {
	cfg   ClientConfig
	log   *slog.Logger
	http  *http.Client
	certs []*x509.Certificate
	// fingerprint is what the proxy should serve with (Fingerprint).
	fingerprint string

	mu       sync.Mutex
	routes   *proxy.Routes // last set, sent again to a new process
	sentTo   string        // the process (Status.ID) they were last sent to
	sentHash [32]byte
	status   Status
}

// NewClient makes sure a proxy process of this version serves cfg.Dir
// (starting or taking one over) and returns its client.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = 2 * time.Second
	}
	c := &Client{cfg: cfg, log: cfg.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("component", "proxy-client")
	sock := sockPath(cfg.Dir, controlSock)
	c.http = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		// A connection per call: the socket's path may be a successor's
		// since the last one.
		DisableKeepAlives: true,
	}}
	if len(cfg.Certs) > 0 {
		leaves, err := proxy.LoadLeaves(cfg.Certs)
		if err != nil {
			return nil, err
		}
		c.certs = leaves
	}
	c.fingerprint = Fingerprint(proxy.Config{HTTPAddr: cfg.HTTPAddr, HTTPSAddr: cfg.HTTPSAddr}, c.certs)
	if err := c.ensure(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// ensure starts a proxy process when none answers, and takes over one of
// another version.
func (c *Client) ensure(ctx context.Context) error {
	st, err := c.Status(ctx)
	switch {
	case ctx.Err() != nil:
		return ctx.Err() // asked to stop, not told the proxy is gone
	case err != nil:
		c.log.Info("no proxy process answers: starting one", "dir", c.cfg.Dir, "error", err)
		return c.start(ctx, false, "")
	case st.Version != c.cfg.Version:
		c.log.Info("the proxy process runs another version: taking it over", "pid", st.PID, "version", st.Version, "want", c.cfg.Version)
		return c.start(ctx, true, st.ID)
	case st.Config != c.fingerprint:
		c.log.Info("the proxy process serves other addresses or certificates: taking it over", "pid", st.PID)
		return c.start(ctx, true, st.ID)
	}
	c.mu.Lock()
	c.status = st
	c.mu.Unlock()
	return nil
}

// start runs a proxy process, detached from the agent (its own session:
// it outlives the agent), and waits until it answers, as a process other
// than old (a Status.ID). One that cannot start says why on a pipe
// (--report-fd): an address it cannot listen on comes back as the
// *listen.Error it met, naming who holds the address.
func (c *Client) start(ctx context.Context, takeover bool, old string) error {
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(c.cfg.Dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{}, c.cfg.Args...)
	if takeover {
		args = append(args, "--takeover")
	}
	// In a mount namespace of its own (a private copy), where it lets go
	// of the agent's volume mounts (--release-mounts): a process that
	// outlives the agent must not keep a guest's volume busy, nor the
	// agent's mount namespace alive.
	reports, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer reports.Close()
	cmd := exec.Command(c.cfg.Binary, append(args, "--release-mounts", "--report-fd", "3")...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{pw} // fd 3
	cmd.Env = childEnv(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: syscall.CLONE_NEWNS}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return fmt.Errorf("starting the proxy process: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaped when it ends while the agent runs
	report := make(chan startReport, 1)
	// Its own copy of the channel: the wait below sets report to nil once
	// the process serves.
	go func(report chan<- startReport) {
		var r startReport
		if json.NewDecoder(io.LimitReader(reports, 64<<10)).Decode(&r) == nil {
			report <- r
		}
		close(report)
	}(report)
	failed := func(r startReport) error {
		if r.Listen != nil {
			return r.Listen
		}
		return fmt.Errorf("the proxy process (pid %d) could not start: %s", pid, r.Error)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		st, err := c.Status(ctx)
		if err == nil && st.ID != old {
			c.mu.Lock()
			c.status = st
			c.mu.Unlock()
			c.log.Info("proxy process serving", "pid", st.PID, "version", st.Version, "took_over", takeover)
			return nil
		}
		select {
		case r, ok := <-report:
			if ok && !r.Serving {
				return failed(r)
			}
			report = nil // serving: its answers say the rest
		case err := <-exited:
			// Its pipe closed with it: a report it made is there.
			if report != nil {
				if r, ok := <-report; ok && !r.Serving {
					return failed(r)
				}
			}
			return fmt.Errorf("the proxy process (pid %d) ended at start: %v; see %s", pid, err, filepath.Join(c.cfg.Dir, logFile))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy process (pid %d) does not answer after %s; see %s", pid, startTimeout, filepath.Join(c.cfg.Dir, logFile))
		}
	}
}

// childEnv is the agent's environment without what its service manager
// gave it alone (the notify socket, the watchdog, passed sockets): the
// proxy process is not the unit's main process.
func childEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Status asks the proxy process how it is.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.get(ctx, "/status", &st)
	return st, err
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://proxy"+path, nil)
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		return fmt.Errorf("proxy %s: %s: %s", path, res.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(res.Body).Decode(v)
}

// SetRoutes sets the proxy's routes (see [proxy.Proxy.SetRoutes]); the
// client keeps them to send again to a process that replaced this one.
// Routes equal to those the process has are not sent.
func (c *Client) SetRoutes(r proxy.Routes) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("setting routes: %w", err)
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	c.mu.Lock()
	pid := c.status.ID
	same := c.sentTo == pid && c.sentHash == sum
	c.routes = &r
	c.mu.Unlock()
	if same {
		return nil
	}
	return c.put(body, sum, pid)
}

func (c *Client) put(body []byte, sum [32]byte, pid string) error {
	req, _ := http.NewRequest(http.MethodPut, "http://proxy/routes", bytes.NewReader(body))
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("proxy process: %w", err)
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	switch res.StatusCode {
	case http.StatusNoContent:
	case http.StatusConflict: // in force, but for some TCP ports
		c.remember(sum, pid)
		return fmt.Errorf("%w: %s", proxy.ErrListen, strings.TrimSpace(string(msg)))
	default:
		return fmt.Errorf("proxy process: %s: %s", res.Status, strings.TrimSpace(string(msg)))
	}
	c.remember(sum, pid)
	return nil
}

func (c *Client) remember(sum [32]byte, pid string) {
	c.mu.Lock()
	c.sentTo, c.sentHash = pid, sum
	c.mu.Unlock()
}

// Routes are the routes in force in the proxy process (the last set
// when it does not answer).
func (c *Client) Routes() proxy.Routes {
	var r proxy.Routes
	if err := c.get(context.Background(), "/routes", &r); err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.routes != nil {
			return *c.routes
		}
	}
	return r
}

// InFlight is how many requests to target the proxy serves now (0 when
// it does not answer).
func (c *Client) InFlight(target string) int64 {
	var n int64
	c.get(context.Background(), "/inflight?target="+target, &n)
	return n
}

// Requests is the proxy's count of requests answered, by route host
// (Proxy.Requests); empty when the proxy does not answer.
func (c *Client) Requests() map[string]uint64 {
	n := map[string]uint64{}
	c.get(context.Background(), "/requests", &n)
	return n
}

// Errors is the proxy's count of answers of status 500 or above, by
// route host (Proxy.Errors); empty when the proxy does not answer.
func (c *Client) Errors() map[string]uint64 {
	n := map[string]uint64{}
	c.get(context.Background(), "/errors", &n)
	return n
}

// HTTPAddr is the proxy's HTTP listen address.
func (c *Client) HTTPAddr() net.Addr {
	return c.addr(c.cfg.HTTPAddr, func(s Status) string { return s.HTTPAddr })
}

// HTTPSAddr is the proxy's HTTPS listen address, nil without HTTPS.
func (c *Client) HTTPSAddr() net.Addr {
	if c.cfg.HTTPSAddr == "" {
		return nil
	}
	return c.addr(c.cfg.HTTPSAddr, func(s Status) string { return s.HTTPSAddr })
}

func (c *Client) addr(configured string, of func(Status) string) net.Addr {
	c.mu.Lock()
	s := of(c.status)
	c.mu.Unlock()
	if s == "" {
		s = configured
	}
	a, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		return &net.TCPAddr{}
	}
	return a
}

// Certificates are the HTTPS certificates' leaves.
func (c *Client) Certificates() []*x509.Certificate { return c.certs }

// Run checks on the proxy process until ctx ends: one that stopped
// answering is started again, and routes go again to a new process.
// The process itself stays when ctx ends: ingress outlives the agent.
func (c *Client) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.CheckEvery)
	defer t.Stop()
	var (
		failures int
		next     time.Time // no start tried before then
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if time.Now().Before(next) {
			continue
		}
		if err := c.ensure(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait := retryWait(failures, c.cfg.CheckEvery)
			next = time.Now().Add(wait)
			c.log.Warn("the proxy process", "error", err, "failures", failures, "retry_in", wait)
			continue
		}
		failures, next = 0, time.Time{}
		c.mu.Lock()
		r, pid, sent := c.routes, c.status.ID, c.sentTo
		c.mu.Unlock()
		if r != nil && pid != sent {
			if err := c.SetRoutes(*r); err != nil {
				c.log.Warn("setting routes in the new proxy process", "id", pid, "error", err)
			}
		}
	}
}

// maxRetryWait bounds the wait between tries to start a proxy process
// that keeps failing (a port taken, a broken binary).
const maxRetryWait = time.Minute

// retryWait is the wait after the n-th failed try in a row: every check,
// then doubling up to maxRetryWait.
func retryWait(n int, every time.Duration) time.Duration {
	wait := every
	for i := 1; i < n && wait < maxRetryWait; i++ {
		wait *= 2
	}
	return min(wait, maxRetryWait)
}

// Stop ends the proxy process (draining it): for a node taken down,
// not for an agent restart.
func (c *Client) Stop() error {
	st, err := c.Status(context.Background())
	if err != nil {
		return nil // nothing answers
	}
	p, err := os.FindProcess(st.PID)
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGTERM)
}

// Gather returns the proxy process's own metric families (corpus_proxy_*),
// for the agent's endpoint; none when it does not answer.
func (c *Client) Gather() ([]*dto.MetricFamily, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://proxy/metrics", nil)
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	res, err := c.http.Do(req)
	if err != nil {
		return nil, nil
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("the proxy process's metrics: %w", err)
	}
	var out []*dto.MetricFamily
	for name, f := range fams {
		if strings.HasPrefix(name, "corpus_proxy") {
			out = append(out, f)
		}
	}
	return out, nil
}
