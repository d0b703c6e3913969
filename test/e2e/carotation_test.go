package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestCARotationLive: a group of three coordinators and two agents (each
// in its own namespace), a guest on each served through its node's proxy
// under steady traffic, writes through every replica, the agents'
// watches open. `corpus operator ca rotate` replaces the cluster CA: no
// proxied request fails, no guest restarts, no write is refused (the
// writer, like a user, takes `ca status --pem` into its CA file as the
// rotation goes), every replica and node ends on a certificate of the
// new CA with it alone trusted, the old CA is refused. Then a replica
// restarted with its original --cluster-ca flags and an agent restarted
// come back on the new CA, and the CLI works on the CA the rotation
// saved into its config. A node away during a second rotation, ended
// without it (--finish), rejoins with a rejoin token as the same node.
func TestCARotationLive(t *testing.T) {
	requireE2E(t)
	lab := newNetLab(t)
	ctlSide := fmt.Sprintf("10.%d.1.1", lab.k)
	g := newCoordGroupBin(t, lab, ctlSide, corpusBin, "--ca-trust-period", "3s")
	oldPEM, err := os.ReadFile(g.ca)
	if err != nil {
		t.Fatal(err)
	}
	oldCA, err := pki.ParseCert(oldPEM)
	if err != nil {
		t.Fatal(err)
	}
	// The file the test's clients trust, as a user's would be: the
	// group's CA file stays what the replicas were started with.
	trustFile := filepath.Join(g.dir, "trust.pem")
	if err := writeFileAtomic(trustFile, oldPEM); err != nil {
		t.Fatal(err)
	}
	g.ca = trustFile
	c := &cluster{t: t, lab: lab, dir: g.dir, api: g.api["c1"], token: g.token, ca: trustFile, cfgHome: g.dir + "/cfg", agents: map[string]*agentProc{}}
	agents := []*agentProc{c.addAgent("n1", "--label", "zone=a"), c.addAgent("n2", "--label", "zone=b")}
	var urls []func() error
	pids := map[string]int{}
	for i, a := range agents {
		guest := fmt.Sprintf("web%d", i+1)
		domain := guest + ".example.test"
		ns, addr := lab.addClient(a.node)
		c.mustCLI("guest", "create", guest, "--image", "busybox", "--memory", "64M", "--cpus", "0.2", "--constraint", fmt.Sprintf("zone=%c", 'a'+i))
		serveHTTP(t, c, guest, guest)
		c.mustCLI("guest", "expose", guest, "--proxy", "--domain", domain, "--port", "80")
		check := wantBody(httpIn(ns), "http://"+addr+"/", domain, guest)
		eventually(t, 20*time.Second, "the proxy to "+guest, check)
		urls = append(urls, check)
		_, pid, err := a.lxc.info(guest)
		if err != nil || pid == 0 {
			t.Fatalf("%s's init: pid %d, %v", guest, pid, err)
		}
		pids[guest] = pid
	}

	var failures []string
	var mu sync.Mutex
	fail := func(f string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(f, args...))
	}
	var requests, writes atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, check := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := check(); err != nil && ctx.Err() == nil {
					fail("proxied request: %v", err)
				}
				requests.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			id := g.ids[i%len(g.ids)]
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := g.dns(id).AddRecord(wctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: fmt.Sprintf("rot-%d", i), Type: "TXT", Data: "v"}))
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				fail("write through %s: %v", id, err)
			}
			writes.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// The user's side: the CAs to trust, taken as the rotation goes.
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if out, _, code := c.cli("operator", "ca", "status", "--pem"); code == 0 && strings.Contains(out, "BEGIN CERTIFICATE") {
				if err := writeFileAtomic(trustFile, []byte(out)); err != nil {
					fail("writing the trust file: %v", err)
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()

	// The operator's CLI on an environment of its config file, the CA
	// in it: the rotation saves the new one there.
	cliEnv := []string{"XDG_CONFIG_HOME=" + c.cfgHome, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT="}
	oldFile := filepath.Join(g.dir, "old-ca.pem")
	if err := os.WriteFile(oldFile, oldPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := c.cliIn(lab.ctl, cliEnv, "env", "add", "rot", "--address", c.api, "--token", c.token, "--ca-cert", oldFile, "--use"); code != 0 {
		t.Fatalf("corpus env add: exit %d: %s%s", code, out, errOut)
	}
	began := time.Now()
	out, errOut, code := c.cliIn(lab.ctl, cliEnv, "operator", "ca", "rotate", "--timeout", "3m")
	took := time.Since(began)
	t.Logf("corpus operator ca rotate (%s), exit %d:\n%s%s", took.Round(time.Millisecond), code, errOut, out)
	if code != 0 {
		t.Fatal("corpus operator ca rotate failed")
	}
	var st struct {
		Status struct {
			Current struct {
				Pin string `json:"pin"`
			} `json:"current"`
			Next     *json.RawMessage `json:"next"`
			Replicas []struct {
				Name  string `json:"name"`
				CaPin string `json:"ca_pin"`
			} `json:"replicas"`
			Nodes []struct {
				Name  string `json:"name"`
				CaPin string `json:"ca_pin"`
			} `json:"nodes"`
			TrustedPem string `json:"trusted_pem"`
		} `json:"status"`
	}
	// Each agent renews once more at the end (its trust narrows); a
	// few more requests and writes on the new CA alone, then stop.
	eventually(t, 30*time.Second, "every node on the new CA alone", func() error {
		if err := c.json(&st, "operator", "ca", "status"); err != nil {
			return err
		}
		if st.Status.Next != nil || st.Status.Current.Pin == pki.Pin(oldCA) {
			return fmt.Errorf("the rotation has not ended: current %s", st.Status.Current.Pin)
		}
		for _, a := range agents {
			var n struct {
				Node struct {
					Node struct {
						TrustedCaPins []string `json:"trusted_ca_pins"`
					} `json:"node"`
				} `json:"node"`
			}
			if err := c.json(&n, "node", "show", a.name); err != nil {
				return err
			}
			if got := n.Node.Node.TrustedCaPins; len(got) != 1 || got[0] != st.Status.Current.Pin {
				return fmt.Errorf("%s trusts %v", a.name, got)
			}
		}
		return nil
	})
	if err := writeFileAtomic(trustFile, []byte(st.Status.TrustedPem)); err != nil {
		t.Fatal(err)
	}
	w := writes.Load()
	eventually(t, 20*time.Second, "writes on the new CA", func() error {
		if writes.Load() < w+10 {
			return fmt.Errorf("%d writes since", writes.Load()-w)
		}
		return nil
	})
	stop()
	wg.Wait()
	t.Logf("rotation %s; %d proxied requests, %d writes, %d failed", took.Round(time.Millisecond), requests.Load(), writes.Load(), len(failures))
	for _, f := range failures {
		t.Errorf("failed during the rotation: %s", f)
	}
	next := st.Status.Current.Pin
	for _, r := range st.Status.Replicas {
		if r.CaPin != next {
			t.Errorf("replica %s holds a certificate of CA %.16s, not the new one", r.Name, r.CaPin)
		}
	}
	for _, n := range st.Status.Nodes {
		if n.CaPin != next {
			t.Errorf("node %s holds a certificate of CA %.16s, not the new one", n.Name, n.CaPin)
		}
	}
	for i, a := range agents {
		guest := fmt.Sprintf("web%d", i+1)
		if _, pid, err := a.lxc.info(guest); err != nil || pid != pids[guest] {
			t.Errorf("%s's init after the rotation: pid %d, %v; want %d (not restarted)", guest, pid, err, pids[guest])
		}
	}
	// The old CA is refused.
	if err := writeFileAtomic(trustFile, oldPEM); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := c.cli("guest", "list"); code == 0 {
		t.Errorf("the CLI trusting the old CA alone reached the group after the rotation")
	} else {
		t.Logf("the CLI on the old CA alone: %s", strings.TrimSpace(errOut))
	}
	if err := writeFileAtomic(trustFile, []byte(st.Status.TrustedPem)); err != nil {
		t.Fatal(err)
	}

	// A replica restarted with the flags it started with (--cluster-ca
	// names the old CA's files), and an agent restarted: both on the new
	// CA, the agent's guest still served.
	f := g.ids[1]
	g.swap(t, f, corpusBin)
	eventually(t, 60*time.Second, "replica "+f+" back", func() error {
		res, err := g.client(f).Peer(context.Background(), connect.NewRequest(&corpusv1.PeerRequest{}))
		if err != nil {
			return err
		}
		if res.Msg.Leader == "" {
			return fmt.Errorf("%s knows no leader", f)
		}
		return nil
	})
	agents[0].stop(t)
	c.restartAgent(agents[0])
	c.waitAgentBack(agents[0])
	eventually(t, 20*time.Second, "the proxy to web1 after the agent's restart", urls[0])
	// The operator's CLI trusts what the rotation saved.
	if out, errOut, code := c.cliIn(lab.ctl, cliEnv, "guest", "list"); code != 0 {
		t.Errorf("the CLI on the CA the rotation saved: exit %d: %s%s", code, out, errOut)
	}

	// A node away during a second rotation holds it in its trust phase;
	// the operator ends it without the node, which then rejoins with a
	// rejoin token, as the same node, its guest never stopped.
	away := agents[1]
	away.stop(t)
	c.mustCLI("operator", "ca", "rotate", "--no-wait")
	var forced struct {
		Current struct {
			Pin string `json:"pin"`
		} `json:"current"`
		TrustedPem string `json:"trusted_pem"`
	}
	if err := json.Unmarshal([]byte(c.mustCLI("operator", "ca", "rotate", "--finish", "--json")), &forced); err != nil {
		t.Fatal(err)
	}
	if forced.Current.Pin == next || forced.TrustedPem == "" {
		t.Fatalf("after the forced end the cluster CA is %.16s; want a third one", forced.Current.Pin)
	}
	if err := writeFileAtomic(trustFile, []byte(forced.TrustedPem)); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(c.mustCLI("node", "token", "--node", away.name))
	away.proc = c.startAgent(away, "--join-token", tok)
	// Its status may still say ready from before it stopped: the
	// certificate it holds says it rejoined, and a report since.
	eventually(t, 30*time.Second, away.name+" rejoined on the new CA", func() error {
		var n struct {
			Node struct {
				Node struct {
					CertCaPin string `json:"cert_ca_pin"`
					Status    string `json:"status"`
				} `json:"node"`
			} `json:"node"`
		}
		if err := c.json(&n, "node", "show", away.name); err != nil {
			return err
		}
		if n.Node.Node.CertCaPin != forced.Current.Pin || n.Node.Node.Status != "ready" {
			return fmt.Errorf("%s is %s with a certificate of CA %.16s", away.name, n.Node.Node.Status, n.Node.Node.CertCaPin)
		}
		return nil
	})
	eventually(t, 30*time.Second, "the proxy to web2 after the rejoin", urls[1])
	if _, pid, err := away.lxc.info("web2"); err != nil || pid != pids["web2"] {
		t.Errorf("web2's init after its node rejoined: pid %d, %v; want %d (not restarted)", pid, err, pids["web2"])
	}
}

// writeFileAtomic replaces a file others read at any time.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
