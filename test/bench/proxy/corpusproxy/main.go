// Command corpusproxy runs the netns/proxy ingress with one HTTP route, for
// the proxy benchmark. It prints its HTTP address on the first line of its
// output (and with -cert, its HTTPS address on the second) and serves until
// SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"corpus/netns/proxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "HTTP listen address")
	host := flag.String("host", "bench.test", "routed host name")
	target := flag.String("target", "", "target host:port")
	httpsListen := flag.String("https-listen", "127.0.0.1:0", "HTTPS listen address (with -cert)")
	certFile := flag.String("cert", "", "PEM certificate chain: serve HTTPS too")
	keyFile := flag.String("key", "", "PEM private key of -cert")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "corpusproxy:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := proxy.Config{HTTPAddr: *listen, Logger: logger}
	if *certFile != "" {
		cfg.HTTPSAddr = *httpsListen
		cfg.Certs = []proxy.CertFiles{{CertFile: *certFile, KeyFile: *keyFile}}
	}
	if err := run(cfg, *host, *target); err != nil {
		fmt.Fprintln(os.Stderr, "corpusproxy:", err)
		os.Exit(1)
	}
}

func run(cfg proxy.Config, host, target string) error {
	p, err := proxy.New(cfg)
	if err != nil {
		return err
	}
	if err := p.SetRoutes(proxy.Routes{HTTP: map[string]proxy.HTTPRoute{host: {Targets: []string{target}}}}); err != nil {
		p.Close()
		return err
	}
	fmt.Println(p.HTTPAddr())
	if a := p.HTTPSAddr(); a != nil {
		fmt.Println(a)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return p.Run(ctx)
}
