// Package metrics holds what every corpus daemon shares to be scraped by
// Prometheus: the registry a daemon makes at start and hands down to its
// components, and the HTTP server that serves it. Each component defines
// its own metrics next to what they measure and registers them into the
// registry it is given; nothing here is global.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Namespace starts the name of every corpus metric.
const Namespace = "corpus"

// NewRegistry returns a registry holding the Go runtime and process
// collectors, for one daemon (or one `corpus dev` process) to share.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return r
}

// Registerer returns r, or a registry nobody serves when r is nil, so a
// component given no registry can register its metrics all the same.
func Registerer(r prometheus.Registerer) prometheus.Registerer {
	if r == nil {
		return prometheus.NewRegistry()
	}
	return r
}

// Handler serves the metrics of g in the Prometheus text (or
// OpenMetrics) format. A collector that fails is reported in the answer
// and in the log; the others are still served.
func Handler(g prometheus.Gatherer, logger *slog.Logger) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
		Timeout:           10 * time.Second,
	})
}

// Server serves one registry on /metrics.
type Server struct {
	ln     net.Listener
	http   *http.Server
	mux    *http.ServeMux
	logger *slog.Logger
}

// Listen binds addr (host:port; port 0 picks one) for the metrics of g.
// Serve then answers.
func Listen(addr string, g prometheus.Gatherer, logger *slog.Logger) (*Server, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("metrics address %q: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "metrics")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(g, logger))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "corpus metrics are at /metrics")
	})
	return &Server{ln: ln, logger: logger, mux: mux, http: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}}, nil
}

// ServeProfiles adds Go's runtime profiles (CPU, heap, goroutines,
// execution trace) under /debug/pprof/, for an operator chasing where a
// daemon spends its time. Off unless asked for: they say how the daemon
// works inside (never what its memory holds), and a CPU profile costs
// while it runs. Call it before Serve.
func (s *Server) ServeProfiles() {
	s.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	s.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	s.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is where the metrics are scraped.
func (s *Server) URL() string { return "http://" + s.Addr() + "/metrics" }

// Serve answers until ctx ends, then shuts down. It returns the error
// that stopped it early, or nil.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.ln) }()
	s.logger.Info("serving metrics", "url", s.URL())
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		s.http.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving metrics: %w", err)
	}
}

// Close stops a server that never served, releasing its listener.
func (s *Server) Close() error { return s.ln.Close() }

// Deferred is a Gatherer whose source is given later (Set); until then it
// gathers nothing. A daemon serves it beside its registry for metrics of
// a process it starts after its endpoint is up.
type Deferred struct {
	g atomic.Pointer[prometheus.Gatherer]
}

// Set gives d its source.
func (d *Deferred) Set(g prometheus.Gatherer) { d.g.Store(&g) }

// Gather gathers from the source, if any.
func (d *Deferred) Gather() ([]*dto.MetricFamily, error) {
	g := d.g.Load()
	if g == nil {
		return nil, nil
	}
	return (*g).Gather()
}
