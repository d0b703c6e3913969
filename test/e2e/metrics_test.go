package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/metrics/metricstest"
)

const prometheusBin = "/usr/bin/prometheus"

// TestPrometheusScrapes: a real Prometheus scrapes a coordinator and an
// agent every second while a guest is created, a push deploys and a
// request goes through the proxy, and its queries see each move. What
// the daemons serve also passes `promtool check metrics`.
func TestPrometheusScrapes(t *testing.T) {
	requireE2E(t)
	if _, err := os.Stat(prometheusBin); err != nil {
		if os.Getenv("CORPUS_TEST_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("%s is missing (apt-get install prometheus) and CORPUS_TEST_REQUIRE_PROMETHEUS=1", prometheusBin)
		}
		t.Skipf("needs a Prometheus server: apt-get install prometheus (%s is missing)", prometheusBin)
	}
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("needs the OpenSSH client (apt-get install openssh-client)")
	}
	// The coordinator serves its metrics on its namespace's loopback (the
	// default); the agent on its node's address, which Prometheus, in
	// the coordinator's namespace, reaches as the coordinator does.
	c := newCluster(t, "--log-format", "json")
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	a.kill()
	agentMetrics := a.node.addr + ":9465"
	a.proc = c.startAgent(a, "--address", nodeAddr, "--metrics-addr", agentMetrics, "--log-format", "json")
	c.waitAgentBack(a)
	l := deployLabOn(t, c, a, client, nodeAddr, []string{"--image", "busybox", "--memory", "64M", "--cpus", "0.2"})

	prom := startPrometheus(t, c.lab.ctl, "127.0.0.1:9464", agentMetrics)
	pq := func(query string) (float64, error) { return prom.query(query) }
	wantAtLeast := func(what, query string, min float64) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() error {
			v, err := pq(query)
			if err != nil {
				return err
			}
			if v < min {
				return fmt.Errorf("%s = %v, want at least %v", query, v, min)
			}
			return nil
		})
	}
	wantAtLeast("both targets up", `sum(up{job="corpus"})`, 2)
	wantAtLeast("the replica leads", `corpus_raft_leader`, 1)
	proxiedBefore, _ := pq(`sum(corpus_proxy_requests_total{route="` + deployDomain + `",status="200"})`)

	// The guest made with the project runs; a push deploys it; a request
	// goes through the proxy.
	wantAtLeast("the project's guest running", `sum(corpus_guests{state="running",driver="lxc"})`, 1)
	// A state no guest is in reads 0: the series is there.
	wantAtLeast("no guest failed", `corpus_guests{state="failed",driver="lxc"}`, 0)
	l.commitSite("one")
	l.mustPush()
	l.wantPage("version one (r1)")
	wantAtLeast("a deploy counted", `corpus_deploys_total{project="hello",outcome="succeeded"}`, 1)
	wantAtLeast("no deploy of the project failed", `corpus_deploys_total{project="hello",outcome="failed"}`, 0)
	wantAtLeast("the deploy timed", `corpus_deploy_duration_seconds_count{project="hello",outcome="succeeded"}`, 1)
	wantAtLeast("proxied requests counted", `sum(corpus_proxy_requests_total{route="`+deployDomain+`",status="200"})`, proxiedBefore+1)
	wantAtLeast("proxied requests timed", `sum(corpus_proxy_request_duration_seconds_count{route="`+deployDomain+`"})`, 1)
	wantAtLeast("API calls counted", `sum(corpus_api_requests_total{code="ok"})`, 1)
	wantAtLeast("reconciles timed", `sum(corpus_agent_reconcile_duration_seconds_count{driver="lxc"})`, 1)
	wantAtLeast("the node certificate's expiry", `corpus_certificate_expiry_seconds{certificate="node"}`, 3600)
	if out, err := exec.Command("nsenter", "--net=/run/netns/"+c.lab.ctl, "dig", "@127.0.0.1", "-p", "8600", "+short", "hello.dev.corpus.test", "A").CombinedOutput(); err != nil {
		t.Fatalf("dig: %v: %s", err, out)
	}
	wantAtLeast("DNS queries counted", `sum(corpus_dns_queries_total{type="A",rcode="NOERROR"})`, 1)

	for _, q := range []string{`sum(corpus_guests{state="running"})`, `sum(corpus_deploys_total{outcome="succeeded"})`,
		`sum(corpus_proxy_requests_total{route="` + deployDomain + `"})`, `sum(corpus_api_requests_total)`, `corpus_raft_applied_index`} {
		v, err := pq(q)
		t.Logf("prometheus: %s = %v %v", q, v, err)
	}

	// Every line the daemons logged is one JSON event.
	for _, p := range []*proc{c.coord, a.proc} {
		for i, line := range strings.Split(strings.TrimSpace(p.log.String()), "\n") {
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev["msg"] == nil {
				t.Errorf("%s log line %d is not a JSON event: %q", p.name, i+1, line)
			}
		}
	}

	// What a scrape returns passes Prometheus' lint.
	hc := httpIn(c.lab.ctl)
	for _, target := range []string{"127.0.0.1:9464", agentMetrics} {
		metricstest.Promtool(t, scrapeWith(t, hc, "http://"+target+"/metrics"))
	}
}

// scrapeWith GETs a /metrics URL with hc in the text format.
func scrapeWith(t *testing.T, hc *http.Client, u string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", u, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("scraping %s: %s %v", u, res.Status, err)
	}
	return b
}

// prometheus is a Prometheus server run by a test in a namespace.
type prometheus struct {
	t    *testing.T
	addr string
	hc   *http.Client
}

// startPrometheus runs Prometheus in namespace ns on its loopback with
// storage in a temporary folder, scraping targets every second; it is
// killed by PID when the test ends.
func startPrometheus(t *testing.T, ns string, targets ...string) *prometheus {
	t.Helper()
	dir := tempDir(t)
	quoted := ""
	for i, tg := range targets {
		if i > 0 {
			quoted += ", "
		}
		quoted += strconv.Quote(tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: corpus\n    static_configs:\n      - targets: [%s]\n", quoted)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The namespace is the test's own: a fixed port there clashes with
	// nothing.
	addr := "127.0.0.1:9090"
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, prometheusBin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		// nsenter execs prometheus: the PID is the server's.
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("--- log of prometheus ---\n%s", log.String())
		}
	})
	p := &prometheus{t: t, addr: addr, hc: httpIn(ns)}
	eventually(t, 30*time.Second, "prometheus ready", func() error {
		res, err := p.hc.Get("http://" + addr + "/-/ready")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("/-/ready: %s", res.Status)
		}
		return nil
	})
	return p
}

// query runs an instant query whose answer is one sample and returns
// its value; no sample is an error.
func (p *prometheus) query(q string) (float64, error) {
	res, err := p.hc.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("query %s: %w", q, err)
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", q, body.Error)
	}
	if len(body.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1", q, len(body.Data.Result))
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}
