package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"corpus/internal/pki"
	"corpus/internal/testrun"
)

// dialIn dials from inside network namespace ns: the socket is created
// on a thread switched into ns and keeps belonging to ns afterwards.
func dialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return inNamespace(ns, func() (net.Conn, error) {
			return (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
		})
	}
}

// inNamespace runs f on an OS thread in namespace ns ("" for the test's
// own): sockets it opens belong to ns. The thread is never unlocked: it
// ends with its goroutine, so a thread in a foreign namespace is never
// reused.
func inNamespace[T any](ns string, f func() (T, error)) (T, error) {
	if ns == "" {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var zero T
		target, err := netns.GetFromName(ns)
		if err != nil {
			ch <- result{zero, err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{zero, err}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// httpIn returns a client whose connections start in namespace ns.
func httpIn(ns string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(ns), DisableKeepAlives: true}}
}

// tlsIn returns a client of corpus APIs whose connections start in
// namespace ns ("" for the test's own), trusting the cluster CA in caFile.
func tlsIn(t *testing.T, ns, caFile string) *http.Client {
	t.Helper()
	tr := tlsTransport(t, ns, caFile)
	tr.DisableKeepAlives = true
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

// tlsTransport trusts the cluster CA in caFile and dials from namespace
// ns ("" for the test's own).
func tlsTransport(t *testing.T, ns, caFile string) *http.Transport {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cas, err := pki.ParseCerts(b)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca)
	}
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: pki.ClientConfig(pool, nil, pki.RoleCoordinator, "")}
	if ns != "" {
		tr.DialContext = dialIn(ns)
	}
	return tr
}

// get fetches url with an optional Host header and returns status and body.
func get(c *http.Client, url, host string) (int, string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, "", err
	}
	if host != "" {
		req.Host = host
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

func wantBody(c *http.Client, url, host, want string) func() error {
	return func() error {
		code, body, err := get(c, url, host)
		if err != nil {
			return err
		}
		if code != 200 || strings.TrimSpace(body) != want {
			return fmt.Errorf("GET %s (Host %q) = %d %q, want 200 %q", url, host, code, body, want)
		}
		return nil
	}
}

// serveHTTP starts busybox httpd in a guest, serving body on port 80.
func serveHTTP(t *testing.T, c *cluster, guest, body string) {
	t.Helper()
	c.mustCLI("guest", "exec", guest, "--", "sh", "-c",
		"mkdir -p /www && echo "+body+" > /www/index.html && httpd -p 80 -h /www")
}

// ruleCount counts corpus's lines in a namespace's iptables.
func ruleCount(t *testing.T, ns string) int {
	t.Helper()
	out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "iptables-save").Output()
	if err != nil {
		t.Fatalf("iptables-save in %s: %v", ns, err)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "CORPUS") {
			n++
		}
	}
	return n
}

// TestIngress: outside traffic reaches LXC guests through the node only,
// by NAT and by the proxy (HTTP by Host, raw TCP); routes move atomically;
// hand-made damage is repaired; connections survive an agent kill -9.
func TestIngress(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	// The agent tells the cluster its outside address, and serves HTTPS
	// with a certificate from files.
	certFile, keyFile, pool := selfSigned(t, "web.example.test")
	agentArgs := []string{"--address", nodeAddr, "--proxy-https-addr", ":443", "--proxy-cert", certFile + ":" + keyFile}
	a.kill()
	a.proc = c.startAgent(a, agentArgs...)
	hc := httpIn(client)

	c.mustCLI("guest", "create", "web", "--image", "busybox", "--memory", "64M", "--cpus", "0.2", "--port", "8080:80", "--port", "7001:7000")
	c.mustCLI("guest", "create", "web2", "--image", "busybox", "--memory", "64M", "--cpus", "0.2")
	serveHTTP(t, c, "web", "one")
	serveHTTP(t, c, "web2", "two")
	c.mustCLI("guest", "exec", "web", "--", "sh", "-c", "nc -ll -p 7000 -e cat </dev/null >/dev/null 2>&1 &")

	// NAT: node port 8080 → web:80.
	eventually(t, 15*time.Second, "NAT to web", wantBody(hc, "http://"+nodeAddr+":8080/", "", "one"))
	// Proxy: Host web.example.test → web:80; TCP 7100 → web:7000.
	c.mustCLI("guest", "expose", "web", "--proxy", "--domain", "web.example.test", "--port", "80")
	c.mustCLI("guest", "expose", "web", "--tcp", "7100:7000")
	eventually(t, 15*time.Second, "proxy to web", wantBody(hc, "http://"+nodeAddr+"/", "web.example.test", "one"))
	if code, _, err := get(hc, "http://"+nodeAddr+"/", "unknown.example.test"); err != nil || code != 404 {
		t.Errorf("proxy with an unknown host = %d, %v; want 404", code, err)
	}
	// HTTPS: the certificate is picked by SNI and verifies.
	hs := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(client),
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "web.example.test"}}}
	eventually(t, 10*time.Second, "https through the proxy", wantBody(hs, "https://"+nodeAddr+"/", "web.example.test", "one"))
	echo := func(port string) error {
		conn, err := dialIn(client)(context.Background(), "tcp", net.JoinHostPort(nodeAddr, port))
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(testrun.D(3 * time.Second)))
		fmt.Fprintln(conn, "ping")
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || line != "ping\n" {
			return fmt.Errorf("echo on %s = %q, %v", port, line, err)
		}
		return nil
	}
	eventually(t, 15*time.Second, "TCP echo through the proxy", func() error { return echo("7100") })

	// Hairpin: the guest reaches itself and web2 through the node's port.
	out := c.mustCLI("guest", "exec", "web2", "--", "wget", "-qO-", "http://"+nodeAddr+":8080/")
	if strings.TrimSpace(out) != "one" {
		t.Errorf("hairpin from web2 through %s:8080 = %q, want one", nodeAddr, out)
	}
	// Masquerade: a guest reaches the outside through the node.
	srv := exec.Command("nsenter", "--net=/run/netns/"+client, "busybox", "httpd", "-f", "-p", "9090", "-h", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	clientAddr := strings.TrimSuffix(nodeAddr, ".1") + ".2"
	eventually(t, 10*time.Second, "guest reaches the client", func() error {
		_, errOut, code := c.cli("guest", "exec", "web", "--", "wget", "-qO-", "http://"+clientAddr+":9090/nothing")
		if code == 0 || strings.Contains(errOut, "404") || strings.Contains(errOut, "Not Found") {
			return nil // an answer from the client's server, even a 404
		}
		return fmt.Errorf("exit %d: %s", code, errOut)
	})

	// Bad input changes nothing.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"guest", "expose", "web2", "--domain", "web.example.test", "--port", "80"}, "already routed"},
		{[]string{"guest", "expose", "web2", "--tcp", "7100"}, "in use"},
		{[]string{"guest", "expose", "web2", "--tcp", "8080"}, "in use"},
		{[]string{"guest", "expose", "web2", "--tcp", "22"}, "lowest publishable port"},
		{[]string{"guest", "expose", "web2", "--domain", "Bad_Domain", "--port", "80"}, "domain"},
		{[]string{"guest", "create", "dup", "--image", "busybox", "--port", "8080:80"}, "port 8080"},
	} {
		if _, errOut, code := c.cli(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("corpus %v = exit %d, %q; want a refusal saying %q", tc.args, code, errOut, tc.want)
		}
	}
	c.cli("guest", "delete", "dup")

	// Atomic move: the domain now serves web2, with no failed request.
	stop := make(chan struct{})
	failures := make(chan string, 100)
	go func() {
		for {
			select {
			case <-stop:
				close(failures)
				return
			default:
			}
			code, body, err := get(hc, "http://"+nodeAddr+"/", "web.example.test")
			if err != nil || code != 200 {
				failures <- fmt.Sprintf("%d %q %v", code, body, err)
			}
		}
	}()
	c.mustCLI("ingress", "move", "--domain", "web.example.test", "--to", "web2")
	eventually(t, 10*time.Second, "route moved to web2", wantBody(hc, "http://"+nodeAddr+"/", "web.example.test", "two"))
	close(stop)
	for f := range failures {
		t.Errorf("request failed during the route move: %s", f)
	}
	list := c.mustCLI("ingress", "list")
	if !strings.Contains(list, "http://web.example.test") || !strings.Contains(list, "tcp/7100") || !strings.Contains(list, "tcp/8080") {
		t.Errorf("ingress list lacks a route:\n%s", list)
	}

	// Kill -9 with a connection open through NAT: it survives, the rules
	// are not duplicated, and the proxy comes back.
	roundTrip := echoer(t, client, net.JoinHostPort(nodeAddr, "7001"))
	if err := roundTrip("before"); err != nil {
		t.Fatal(err)
	}
	// Requests through the proxy from here on, with and without
	// keep-alive, and a TCP stream through it: none may fail across the
	// agent's kill -9 and restart, and the proxy's own upgrade.
	ld := proxyLoad(client, "http://"+nodeAddr+"/", "web.example.test")
	// And wrk, as a load tool counts: every non-2xx answer and socket
	// error over the same window.
	const wrkFor = 25 * time.Second
	wrk, wrkStart := startWrk(t, client, "http://"+nodeAddr+"/", "web.example.test", wrkFor), time.Now()
	streamTrip := echoer(t, client, net.JoinHostPort(nodeAddr, "7100"))
	if err := streamTrip("before"); err != nil {
		t.Fatal(err)
	}
	rules := ruleCount(t, a.node.ns)
	a.kill()
	if err := roundTrip("agent-dead"); err != nil {
		t.Errorf("NAT connection with the agent dead: %v", err)
	}
	time.Sleep(time.Second) // the proxy serves alone meanwhile
	a.proc = c.startAgent(a, agentArgs...)
	eventually(t, 10*time.Second, "agent back", func() error {
		if v := c.guest("web2"); v.Status != "running" {
			return fmt.Errorf("web2 is %v", v)
		}
		return nil
	})
	if err := roundTrip("after-restart"); err != nil {
		t.Errorf("NAT connection after the agent restart: %v", err)
	}
	// The proxy itself upgraded in place: a new process takes the
	// listeners over; the stream opened before stays on the old one.
	proxyDir := filepath.Join(a.stateDir, "proxy")
	old, _ := os.ReadFile(filepath.Join(proxyDir, "proxy.pid"))
	up := startIn(t, a.node.ns, "proxy takeover", nil, "proxy", "--dir", proxyDir, "--http-addr", ":80",
		"--https-addr", ":443", "--cert", certFile+":"+keyFile, "--takeover")
	eventually(t, 10*time.Second, "the new proxy process serving", func() error {
		b, _ := os.ReadFile(filepath.Join(proxyDir, "proxy.pid"))
		if strings.TrimSpace(string(b)) != strconv.Itoa(up.cmd.Process.Pid) {
			return fmt.Errorf("proxy.pid is %q (was %q), want %d", b, old, up.cmd.Process.Pid)
		}
		return nil
	})
	if time.Since(wrkStart) > wrkFor-2*time.Second {
		t.Errorf("the proxy's upgrade came %v after wrk started, past its window of %v", time.Since(wrkStart), wrkFor)
	}
	time.Sleep(time.Second)
	if err := streamTrip("after-takeover"); err != nil {
		t.Errorf("a TCP stream opened before the proxy's upgrade: %v", err)
	}
	ok, failed := ld.stop()
	if res := wrk.wait(t); res.requests == 0 || res.non2xx != 0 || res.socketErrors != "" {
		t.Errorf("wrk across the agent's kill -9, restart and the proxy's upgrade: %d requests, %d non-2xx, socket errors %q\n%s", res.requests, res.non2xx, res.socketErrors, res.out)
	} else {
		t.Logf("wrk across the agent's kill -9, restart and the proxy's upgrade: %d requests, 0 non-2xx, no socket error", res.requests)
	}
	t.Logf("through the proxy across an agent kill -9, restart and a proxy upgrade: %d requests, %d failed", ok+len(failed), len(failed))
	if len(failed) > 0 || ok == 0 {
		t.Errorf("%d requests failed: %v", len(failed), failed[:min(len(failed), 5)])
	}
	time.Sleep(3 * time.Second) // a resync or two
	if got := ruleCount(t, a.node.ns); got != rules {
		t.Errorf("corpus iptables lines after restart = %d, want %d (no duplicates)", got, rules)
	}

	// Hand-made damage: flushed chains and a deleted bridge are repaired.
	nsRun := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + a.node.ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	nsRun("nft", "flush", "chain", "ip", "corpus", "prerouting")
	eventually(t, 15*time.Second, "NAT repaired after a flush", wantBody(hc, "http://"+nodeAddr+":8080/", "", "one"))
	nsRun("ip", "link", "del", "corpus0")
	eventually(t, 15*time.Second, "bridge repaired", wantBody(hc, "http://"+nodeAddr+":8080/", "", "one"))
	eventually(t, 15*time.Second, "proxy to web2 after bridge repair", wantBody(hc, "http://"+nodeAddr+"/", "web.example.test", "two"))
}

// echoer connects to an echo service at addr from namespace ns and
// returns a round trip of one line over that one connection.
func echoer(t *testing.T, ns, addr string) func(msg string) error {
	t.Helper()
	conn, err := dialIn(ns)(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	return func(msg string) error {
		conn.SetDeadline(time.Now().Add(testrun.D(3 * time.Second)))
		fmt.Fprintln(conn, msg)
		line, err := r.ReadString('\n')
		if err != nil || line != msg+"\n" {
			return fmt.Errorf("echo through %s = %q, %v", addr, line, err)
		}
		return nil
	}
}

// ingressLoad is requests sent until stopped.
type ingressLoad struct {
	mu     sync.Mutex
	ok     int
	failed []string
	done   chan struct{}
	wg     sync.WaitGroup
}

// proxyLoad sends GET url (Host host) from namespace ns, over one
// keep-alive client and one that connects per request, until stop.
func proxyLoad(ns, url, host string) *ingressLoad {
	l := &ingressLoad{done: make(chan struct{})}
	for _, keepAlive := range []bool{true, false} {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(ns), DisableKeepAlives: !keepAlive}}
		l.wg.Go(func() {
			for {
				select {
				case <-l.done:
					return
				case <-time.After(5 * time.Millisecond):
				}
				code, body, err := get(hc, url, host)
				l.mu.Lock()
				if err != nil || code != 200 {
					l.failed = append(l.failed, fmt.Sprintf("keep-alive %v: %d %q %v", keepAlive, code, body, err))
				} else {
					l.ok++
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// stop ends the load and says how it went.
func (l *ingressLoad) stop() (ok int, failed []string) {
	close(l.done)
	l.wg.Wait()
	return l.ok, l.failed
}

// selfSigned writes a self-signed certificate for host and returns the
// files and a pool that trusts it.
func selfSigned(t *testing.T, host string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestNodeSubnets: agents in separate namespaces get distinct subnets and
// their guests addresses inside them.
func TestNodeSubnets(t *testing.T) {
	c := newCluster(t)
	c.addAgent("n1", "--label", "zone=a")
	c.addAgent("n2", "--label", "zone=b")
	subnet := func(node string) string {
		var v struct {
			Node struct {
				Node struct {
					GuestSubnet string `json:"guest_subnet"`
				} `json:"node"`
			} `json:"node"`
		}
		if err := c.json(&v, "node", "show", node); err != nil {
			t.Fatal(err)
		}
		return v.Node.Node.GuestSubnet
	}
	s1, s2 := subnet("n1"), subnet("n2")
	if s1 == "" || s2 == "" || s1 == s2 {
		t.Fatalf("node subnets = %q and %q, want two distinct subnets", s1, s2)
	}
	c.mustCLI("guest", "create", "ga", "--image", "busybox", "--memory", "1G", "--cpus", "0.1", "--constraint", "zone=a")
	c.mustCLI("guest", "create", "gb", "--image", "busybox", "--memory", "1G", "--cpus", "0.1", "--constraint", "zone=b")
	for _, g := range []string{"ga", "gb"} {
		var v struct {
			Guest struct {
				Address string `json:"address"`
			} `json:"guest"`
			NodeName string `json:"node_name"`
		}
		if err := c.json(&v, "guest", "show", g); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"n1": s1, "n2": s2}[v.NodeName]
		prefix := strings.TrimSuffix(want, "0/24")
		if !strings.HasPrefix(v.Guest.Address, prefix) {
			t.Errorf("guest %s on %s has address %q, want one in %s", g, v.NodeName, v.Guest.Address, want)
		}
		out := c.mustCLI("guest", "exec", g, "--", "ip", "-4", "addr", "show", "eth0")
		if !strings.Contains(out, v.Guest.Address+"/24") {
			t.Errorf("eth0 of %s = %q, want address %s", g, out, v.Guest.Address)
		}
		// The coordinator's DNS answers the guest's name (real dig).
		eventually(t, 5*time.Second, "dig "+g, func() error {
			out, err := exec.Command("nsenter", "--net=/run/netns/"+c.lab.ctl, "dig", "@127.0.0.1", "-p", "8600",
				g+".guest.corpus.test", "A", "+short", "+norecurse").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != v.Guest.Address {
				return fmt.Errorf("dig = %q, %v; want %s", out, err, v.Guest.Address)
			}
			return nil
		})
	}
	// Guests resolve cluster names through their node's resolver.
	var gb struct {
		Guest struct {
			Address string `json:"address"`
		} `json:"guest"`
	}
	if err := c.json(&gb, "guest", "show", "gb"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "ga resolves gb", func() error {
		out, errOut, code := c.cli("guest", "exec", "ga", "--", "nslookup", "gb.guest.corpus.test")
		if code != 0 || !strings.Contains(out, gb.Guest.Address) {
			return fmt.Errorf("nslookup in ga = exit %d: %s %s", code, out, errOut)
		}
		return nil
	})
	if out := c.mustCLI("guest", "exec", "ga", "--", "cat", "/etc/resolv.conf"); !strings.Contains(out, "search guest.corpus.test corpus.test") {
		t.Errorf("resolv.conf of ga = %q, want the cluster search list", out)
	}
	// A deleted guest's name is gone within a second or so.
	c.mustCLI("guest", "delete", "gb")
	eventually(t, 3*time.Second, "gb removed from DNS", func() error {
		out, _ := exec.Command("nsenter", "--net=/run/netns/"+c.lab.ctl, "dig", "@127.0.0.1", "-p", "8600",
			"gb.guest.corpus.test", "A", "+norecurse").CombinedOutput()
		if !strings.Contains(string(out), "NXDOMAIN") {
			return fmt.Errorf("dig gb = %s", out)
		}
		return nil
	})
}

// wrkRun is a wrk load started in a namespace.
type wrkRun struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type wrkResult struct {
	requests, non2xx int
	socketErrors     string // wrk's "Socket errors" line, "" without any
	out              string
}

// startWrk loads url (Host host) from namespace ns with wrk for d: 2
// threads, 8 keep-alive connections.
func startWrk(t *testing.T, ns, url, host string, d time.Duration) *wrkRun {
	t.Helper()
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Fatal("needs wrk (scripts/setup --test installs it)")
	}
	w := &wrkRun{out: &syncBuffer{}}
	w.cmd = exec.Command("ip", "netns", "exec", ns, bin, "-t2", "-c8", "-d"+strconv.Itoa(int(d.Seconds()))+"s", "-H", "Host: "+host, url)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			w.cmd.Process.Kill()
			w.cmd.Wait()
		}
	})
	return w
}

// wait waits for wrk to end and reads its counts.
func (w *wrkRun) wait(t *testing.T) wrkResult {
	t.Helper()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("wrk: %v\n%s", err, w.out.String())
	}
	res := wrkResult{out: w.out.String()}
	for _, line := range strings.Split(res.out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.Contains(line, "requests in"):
			res.requests, _ = strconv.Atoi(strings.Fields(line)[0])
		case strings.HasPrefix(line, "Non-2xx or 3xx responses:"):
			res.non2xx, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Non-2xx or 3xx responses:")))
		case strings.HasPrefix(line, "Socket errors:"):
			res.socketErrors = line
		}
	}
	return res
}
