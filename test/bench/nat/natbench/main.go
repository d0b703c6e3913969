// Command natbench drives corpus's netns and nat packages for
// test/bench/nat/run, in the network namespace it is started in (the
// script starts it with `ip netns exec`): it sets up a bridge and guest
// veths, times Apply at scale, and serves and dials TCP for a
// connection-rate figure. It prints results as "key value" lines.
//
//	natbench setup  -bridge br0 -gateway 10.210.3.1/24 -veth vg1 -peerns /run/netns/G
//	natbench apply  -n 10000 -bridge br0 -subnet 10.210.3.0/24 -guest 10.210.3.2 -publish tcp:15201:5201
//	natbench remove
//	natbench serve  -listen :5300
//	natbench dial   -addr 10.99.0.1:15300 -duration 5s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"corpus/netns"
	"corpus/netns/nat"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: natbench setup|apply|remove|serve|dial [flags]")
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"setup": setup, "apply": apply, "remove": remove, "serve": serve, "dial": dial,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "natbench: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "natbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func setup(args []string) error {
	fs := flag.NewFlagSet("setup", flag.ExitOnError)
	bridge := fs.String("bridge", "br0", "bridge name")
	gateway := fs.String("gateway", "10.210.3.1/24", "bridge address")
	veth := fs.String("veth", "", "node end of a guest veth (optional)")
	peer := fs.String("peer", "eth0", "guest end of the veth")
	peerNS := fs.String("peerns", "", "namespace file of the guest")
	fs.Parse(args)
	gw, err := netip.ParsePrefix(*gateway)
	if err != nil {
		return err
	}
	ctx := context.Background()
	h := netns.New(netns.Config{Logger: logger})
	if _, err := h.EnsureBridge(ctx, netns.Bridge{Name: *bridge, Gateway: gw}); err != nil {
		return err
	}
	if *veth == "" {
		return nil
	}
	_, err = h.EnsureVeth(ctx, netns.Veth{Name: *veth, Peer: *peer, Bridge: *bridge, PeerNS: *peerNS})
	return err
}

type publishes []nat.Forward

func (p *publishes) String() string { return fmt.Sprint(*p) }

// Set parses proto:hostport:guestport.
func (p *publishes) Set(s string) error {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return errors.New("want proto:hostport:guestport")
	}
	hp, err1 := strconv.Atoi(parts[1])
	gp, err2 := strconv.Atoi(parts[2])
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	*p = append(*p, nat.Forward{Proto: parts[0], HostPort: hp, GuestPort: gp})
	return nil
}

func apply(args []string) error {
	fs := flag.NewFlagSet("apply", flag.ExitOnError)
	n := fs.Int("n", 10000, "filler forwards on tcp ports 20000..")
	bridge := fs.String("bridge", "br0", "bridge name")
	subnet := fs.String("subnet", "10.210.3.0/24", "guest subnet")
	guest := fs.String("guest", "10.210.3.2", "guest address the forwards point at")
	reps := fs.Int("reps", 5, "repetitions of each single change")
	var pub publishes
	fs.Var(&pub, "publish", "proto:hostport:guestport forwarded to -guest (repeatable)")
	fs.Parse(args)
	sn, err := netip.ParsePrefix(*subnet)
	if err != nil {
		return err
	}
	g, err := netip.ParseAddr(*guest)
	if err != nil {
		return err
	}
	d := nat.Desired{Subnets: []netip.Prefix{sn}, Bridge: *bridge}
	for _, f := range pub {
		f.GuestAddr = g
		d.Forwards = append(d.Forwards, f)
	}
	for i := range *n {
		d.Forwards = append(d.Forwards, nat.Forward{Proto: "tcp", HostPort: 20000 + i, GuestAddr: g, GuestPort: 9})
	}
	ctx := context.Background()
	m, err := nat.New(nat.Config{Logger: logger})
	if err != nil {
		return err
	}
	if err := m.Remove(ctx); err != nil {
		return err
	}
	took, err := timed(func() error { return m.Apply(ctx, d) })
	if err != nil {
		return err
	}
	fmt.Printf("forwards %d\n", len(d.Forwards))
	fmt.Printf("apply_from_empty_ms %.1f\n", ms(took))

	one := d
	one.Forwards = append(slices.Clone(d.Forwards), nat.Forward{Proto: "udp", HostPort: 40000, GuestAddr: g, GuestPort: 53})
	var add, del, noop []time.Duration
	var lines []int
	for range *reps {
		p, err := m.Plan(ctx, one)
		if err != nil {
			return err
		}
		lines = append(lines, p.RestoreLines())
		t, err := timed(func() error { return m.Apply(ctx, one) })
		if err != nil {
			return err
		}
		add = append(add, t)
		if t, err = timed(func() error { return m.Apply(ctx, d) }); err != nil {
			return err
		}
		del = append(del, t)
		if t, err = timed(func() error { return m.Apply(ctx, d) }); err != nil {
			return err
		}
		noop = append(noop, t)
	}
	fmt.Printf("add_one_ms %.1f\n", ms(median(add)))
	fmt.Printf("remove_one_ms %.1f\n", ms(median(del)))
	fmt.Printf("noop_ms %.1f\n", ms(median(noop)))
	fmt.Printf("add_one_restore_lines %d\n", slices.Max(lines))
	return nil
}

func remove([]string) error {
	m, err := nat.New(nat.Config{Logger: logger})
	if err != nil {
		return err
	}
	return m.Remove(context.Background())
}

// serve accepts connections and closes them after reading to EOF.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("listen", ":5300", "listen address")
	fs.Parse(args)
	l, err := net.Listen("tcp4", *addr)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			io.Copy(io.Discard, c)
			c.Close()
		}()
	}
}

// dial opens and closes connections one after another for the duration
// and prints how many per second completed.
func dial(args []string) error {
	fs := flag.NewFlagSet("dial", flag.ExitOnError)
	addr := fs.String("addr", "", "address to connect to")
	dur := fs.Duration("duration", 5*time.Second, "how long to dial")
	fs.Parse(args)
	var n, failed int
	d := net.Dialer{Timeout: time.Second}
	start := time.Now()
	for time.Since(start) < *dur {
		c, err := d.Dial("tcp4", *addr)
		if err != nil {
			failed++
			continue
		}
		// Close with RST so closed sockets do not pile up in TIME_WAIT.
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		n++
	}
	fmt.Printf("conns_per_s %.0f\n", float64(n)/time.Since(start).Seconds())
	fmt.Printf("conns_failed %d\n", failed)
	return nil
}

func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
