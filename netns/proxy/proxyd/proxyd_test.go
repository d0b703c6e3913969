package proxyd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"corpus/internal/testrun"
	"corpus/netns/proxy"
)

// running is a proxy process's Run in this test process.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, dir string, takeover bool, pc proxy.Config) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- Run(ctx, Config{Dir: dir, Proxy: pc, Takeover: takeover, Version: "test", DrainTimeout: 5 * time.Second,
			Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("proxy process: %v", err)
	case <-time.After(testrun.D(10 * time.Second)):
		cancel()
		t.Fatal("proxy process not ready")
	}
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// client is a Client of the proxy serving dir, starting nothing.
func client(dir string) *Client {
	c := &Client{cfg: ClientConfig{Dir: dir}}
	c.log = slog.New(slog.DiscardHandler)
	sock := sockPath(dir, controlSock)
	c.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	return c
}

// load sends requests for host to addr from several clients until stop,
// counting answers other than 200 and errors.
type load struct {
	ok, bad atomic.Int64
	errs    sync.Map
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startLoad(addr, host string, clients int) *load {
	l := &load{stop: make(chan struct{})}
	for i := range clients {
		// Half keep their connections alive, half make one per request.
		tr := &http.Transport{DisableKeepAlives: i%2 == 1}
		hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
				req.Host = host
				res, err := hc.Do(req)
				if err != nil {
					l.bad.Add(1)
					l.errs.Store(fmt.Sprintf("keepalive=%v %v", i%2 == 0, err), true)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					l.bad.Add(1)
					l.errs.Store(res.Status, true)
					continue
				}
				l.ok.Add(1)
			}
		})
	}
	return l
}

func (l *load) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	var errs []string
	l.errs.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
	t.Logf("%d requests answered 200, %d not %v", l.ok.Load(), l.bad.Load(), errs)
	if l.bad.Load() != 0 || l.ok.Load() == 0 {
		t.Errorf("%d failed requests of %d", l.bad.Load(), l.ok.Load()+l.bad.Load())
	}
}

// TestTakeover: a successor takes the listeners of a running proxy over
// under load: no request fails, the routes come along, the old process
// ends once its connections are done, and a proxy started afresh
// serves the routes kept from before.
func TestTakeover(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		fmt.Fprintln(w, "hello")
	}))
	defer backend.Close()
	dir := t.TempDir()
	pc := proxy.Config{HTTPAddr: "127.0.0.1:0"}
	old := start(t, dir, false, pc)
	c := client(dir)
	st1, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	routes := proxy.Routes{HTTP: map[string]proxy.HTTPRoute{"web.example.test": {Targets: []string{backend.Listener.Addr().String()}}}}
	if err := c.SetRoutes(routes); err != nil {
		t.Fatal(err)
	}
	l := startLoad(st1.HTTPAddr, "web.example.test", 8)
	time.Sleep(300 * time.Millisecond)

	// A successor whose proxy cannot start (a certificate file that is
	// not there) leaves the old one serving.
	bad := pc
	bad.HTTPSAddr = "127.0.0.1:0"
	bad.Certs = []proxy.CertFiles{{CertFile: filepath.Join(dir, "missing.pem"), KeyFile: filepath.Join(dir, "missing.key")}}
	if err := Run(context.Background(), Config{Dir: dir, Proxy: bad, Takeover: true, Version: "bad"}); err == nil {
		t.Error("a successor with a bad config ran")
	}
	time.Sleep(200 * time.Millisecond)

	start(t, dir, true, pc)
	st2, err := c.Status(context.Background())
	if err != nil || st2.ID == st1.ID || st2.HTTPAddr != st1.HTTPAddr || st2.Routes != 1 {
		t.Fatalf("after the takeover: %+v %v; before %+v", st2, err, st1)
	}
	select {
	case err := <-old.done:
		old.done <- err // for its cleanup
		if err != nil {
			t.Errorf("the old process ended with %v", err)
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Error("the old process did not end after the takeover")
	}
	time.Sleep(300 * time.Millisecond)
	l.finish(t)
	// The successor counts the requests it answered (the autoscaler's
	// request rates come from here).
	if got := c.Requests()["web.example.test"]; got == 0 {
		t.Errorf("requests counted by the successor = %v", c.Requests())
	}

	// Routes set later are the new process's; a fresh start keeps them.
	routes.HTTP["api.example.test"] = routes.HTTP["web.example.test"]
	if err := c.SetRoutes(routes); err != nil {
		t.Fatal(err)
	}
	if got := c.Routes(); len(got.HTTP) != 2 {
		t.Errorf("routes = %v", got)
	}
	if rs, err := loadRoutes(dir); err != nil || len(rs.HTTP) != 2 {
		t.Errorf("kept routes = %v, %v", rs, err)
	}
	if err := c.SetRoutes(proxy.Routes{HTTP: map[string]proxy.HTTPRoute{"bad host": {}}}); err == nil {
		t.Error("invalid routes were taken")
	}
}

// TestTakeoverWithoutPredecessor: --takeover with nothing running binds
// anew and serves the routes kept in the folder.
func TestTakeoverWithoutPredecessor(t *testing.T) {
	dir := t.TempDir()
	if err := saveRoutes(dir, proxy.Routes{TCP: map[int]proxy.TCPRoute{testrun.FreePort(t): {Target: "127.0.0.1:9"}}}); err != nil {
		t.Fatal(err)
	}
	start(t, dir, true, proxy.Config{HTTPAddr: "127.0.0.1:0"})
	st, err := client(dir).Status(context.Background())
	if err != nil || st.Routes != 1 {
		t.Fatalf("status %+v, %v", st, err)
	}
}

// TestTakeoverElsewhere: a successor configured for another address binds
// it anew (the old address is the old process's until it drains).
func TestTakeoverElsewhere(t *testing.T) {
	dir := t.TempDir()
	start(t, dir, false, proxy.Config{HTTPAddr: "127.0.0.1:0"})
	c := client(dir)
	st1, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	port := testrun.FreePort(t)
	start(t, dir, true, proxy.Config{HTTPAddr: fmt.Sprintf("127.0.0.1:%d", port)})
	st2, err := c.Status(context.Background())
	if err != nil || st2.HTTPAddr != fmt.Sprintf("127.0.0.1:%d", port) || st2.Config == st1.Config {
		t.Errorf("after a takeover to port %d: %+v, %v (before %+v)", port, st2, err, st1)
	}
}

func TestChildEnv(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/x", "WATCHDOG_USEC=1", "HOME=/root"})
	if len(got) != 2 || got[0] != "PATH=/bin" || got[1] != "HOME=/root" {
		t.Errorf("childEnv = %v", got)
	}
}

func TestRetryWaitBacksOff(t *testing.T) {
	every := 2 * time.Second
	for n, want := range map[int]time.Duration{1: every, 2: 2 * every, 3: 4 * every, 5: 16 * every, 6: maxRetryWait, 40: maxRetryWait} {
		if got := retryWait(n, every); got != want {
			t.Errorf("retryWait(%d) = %v, want %v", n, got, want)
		}
	}
}
