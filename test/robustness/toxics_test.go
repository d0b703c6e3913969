package robustness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"corpus/internal/testrun"
)

// Slow links, latency and cut connections come from toxiproxy (the
// kernel here has no netem qdisc), run as its API server inside the
// switch namespace by this test binary itself (toxiproxyEnv). Every
// replica's Raft and API ports have a proxy there, listening on the
// switch's end of that replica's link. While a fault holds, a DNAT rule
// sends the leader's connections to its followers through their
// proxies, and the conntrack entries of the leader's connections are
// deleted, so the ones it had break and it dials again, through the
// proxies; healing undoes both.

// toxiproxyEnv, set to an address, makes the test binary a toxiproxy API
// server listening there (TestMain).
const toxiproxyEnv = "CORPUS_ROBUSTNESS_TOXIPROXY"

const (
	toxiproxyAPI = labNet + ".100.1:8474"
	raftPort     = apiPort + 1
	proxyOffset  = 10000 // a proxy listens on its port + this
)

// serveToxiproxy runs toxiproxy's API server until killed.
func serveToxiproxy(addr string) {
	logger := zerolog.New(os.Stderr).Level(zerolog.ErrorLevel)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toxiproxy:", err)
		os.Exit(2)
	}
	server.Listen(host, port)
}

// startToxiproxy runs the server in sw and makes a proxy for every
// replica's Raft and API port.
func (l *lab) startToxiproxy() {
	cmd := exec.Command("nsenter", "--net=/run/netns/"+l.sw, os.Args[0])
	cmd.Env = append(os.Environ(), toxiproxyEnv+"="+toxiproxyAPI)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("starting toxiproxy: %v", err)
	}
	l.toxiCmd = cmd
	l.t.Cleanup(l.stopToxiproxy)
	l.toxi = toxiclient.NewClient(toxiproxyAPI)
	deadline := time.Now().Add(testrun.D(10 * time.Second))
	for {
		_, err := l.toxi.Proxies()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("toxiproxy did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, addr := range l.addr {
		for _, port := range []int{raftPort, apiPort} {
			listen := fmt.Sprintf("%s.%d.1:%d", labNet, i+1, port+proxyOffset)
			if _, err := l.toxi.CreateProxy(proxyName(i, port), listen, fmt.Sprintf("%s:%d", addr, port)); err != nil {
				l.t.Fatalf("toxiproxy: proxy for %s:%d: %v", addr, port, err)
			}
		}
	}
}

// stopToxiproxy ends the toxiproxy process, once.
func (l *lab) stopToxiproxy() {
	if l.toxiCmd != nil {
		l.toxiCmd.Process.Kill()
		l.toxiCmd.Wait()
		l.toxiCmd = nil
	}
}

func proxyName(replica, port int) string { return fmt.Sprintf("r%d-%d", replica+1, port) }

// throughProxies sends what replica from sends to the Raft and API ports
// of every other replica through their proxies, with toxic (a type and
// its attributes) on both directions of each, and breaks from's
// connections so that it dials again.
func (l *lab) throughProxies(from int, typ string, attrs toxiclient.Attributes) {
	for to := range l.addr {
		if to == from {
			continue
		}
		for _, port := range []int{raftPort, apiPort} {
			l.run("ip", "netns", "exec", l.sw, "iptables", "-w", "-t", "nat", "-A", "PREROUTING",
				"-s", l.addr[from], "-d", l.addr[to], "-p", "tcp", "--dport", fmt.Sprint(port),
				"-j", "DNAT", "--to-destination", fmt.Sprintf("%s.%d.1:%d", labNet, to+1, port+proxyOffset))
			p, err := l.toxi.Proxy(proxyName(to, port))
			if err != nil {
				l.t.Fatalf("toxiproxy: %v", err)
			}
			for _, stream := range []string{"upstream", "downstream"} {
				if _, err := p.AddToxic(typ+"-"+stream, typ, stream, 1, attrs); err != nil {
					l.t.Fatalf("toxiproxy: adding %s to %s: %v", typ, p.Name, err)
				}
			}
		}
	}
	l.breakConnections(from)
}

// direct undoes throughProxies: no DNAT, connections broken again so
// that they are made directly, no toxics. Toxiproxy may fail to remove a
// toxic whose link is stuck writing (seed 42012: "could not write to
// output"); it is asked again, and restarted if it still fails.
func (l *lab) direct(from int) {
	l.run("ip", "netns", "exec", l.sw, "iptables", "-w", "-t", "nat", "-F", "PREROUTING")
	l.breakConnections(from)
	var err error
	for try := 0; try < 3; try++ {
		if err = l.toxi.ResetState(); err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	l.t.Logf("toxiproxy: removing the toxics: %v; restarting it", err)
	l.stopToxiproxy()
	l.startToxiproxy()
}

// breakConnections deletes the conntrack entries of what replica i
// sends, in sw: its next packets on them are new to the NAT table and go
// where its rules say now, which ends those connections.
func (l *lab) breakConnections(i int) {
	// Exit status 1 is "no entry matched".
	exec.Command("ip", "netns", "exec", l.sw, "conntrack", "-D", "-s", l.addr[i]).Run()
}
