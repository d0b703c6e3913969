// Command corpusproxy runs the netns/proxy ingress with one HTTP route, for
// the proxy benchmark. It prints its HTTP address on the first line of its
// output and serves until SIGINT or SIGTERM.
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
	if err := run(*listen, *host, *target, logger); err != nil {
		fmt.Fprintln(os.Stderr, "corpusproxy:", err)
		os.Exit(1)
	}
}

func run(listen, host, target string, logger *slog.Logger) error {
	p, err := proxy.New(proxy.Config{HTTPAddr: listen, Logger: logger})
	if err != nil {
		return err
	}
	if err := p.SetRoutes(proxy.Routes{HTTP: map[string]proxy.HTTPRoute{host: {Targets: []string{target}}}}); err != nil {
		p.Close()
		return err
	}
	fmt.Println(p.HTTPAddr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return p.Run(ctx)
}
