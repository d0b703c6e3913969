// Command corpusdns serves a zone file with the corpus authoritative DNS
// server, for the DNS benchmark only.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/miekg/dns"

	cdns "corpus/dns"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5300", "listen address")
	file := flag.String("zone", "", "zone file")
	origin := flag.String("origin", cdns.DefaultZone, "zone name")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if err := run(*addr, *file, *origin, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "corpusdns:", err)
		os.Exit(1)
	}
}

func run(addr, file, origin, profile string) error {
	if profile != "" {
		p, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer p.Close()
		if err := pprof.StartCPUProfile(p); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	var recs []cdns.Record
	zp := dns.NewZoneParser(f, origin, file)
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		h := rr.Header()
		recs = append(recs, cdns.Record{Name: h.Name, Type: dns.TypeToString[h.Rrtype], TTL: h.Ttl,
			Data: strings.TrimPrefix(rr.String(), h.String())})
	}
	if err := zp.Err(); err != nil {
		return err
	}
	z, err := cdns.NewZone(origin, 1, recs)
	if err != nil {
		return err
	}
	cfg := cdns.DefaultConfig()
	cfg.Addr = addr
	cfg.RateLimit.PerSecond = 0 // one client address sends everything
	s, err := cdns.New(cfg, cdns.NewStaticSource(z), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return s.Shutdown(context.Background())
}
