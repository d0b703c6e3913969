package coordinator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/clock"
	"corpus/internal/metrics"
	"corpus/internal/metrics/metricstest"
	"corpus/internal/pki"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// TestMetricsMove: a coordinator's Raft, API, scheduler, guest and
// certificate metrics follow what it does.
func TestMetricsMove(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.Metrics = reg })
	ctx := context.Background()
	get := func(name string, labels ...string) float64 {
		t.Helper()
		return metricstest.Value(t, reg, name, labels...)
	}
	if got := get("corpus_raft_leader"); got != 1 {
		t.Errorf("raft_leader = %v, want 1 on a replica leading alone", got)
	}
	if got := get("corpus_raft_term"); got < 1 {
		t.Errorf("raft_term = %v, want at least 1", got)
	}
	applied := get("corpus_raft_applied_index")
	if applied < 1 || get("corpus_raft_commit_index") < applied {
		t.Errorf("raft applied index %v, commit index %v: want applied > 0 and commit >= applied", applied, get("corpus_raft_commit_index"))
	}
	applies := metricstest.HistogramCount(t, reg, "corpus_raft_apply_duration_seconds")

	ops := s.ops()
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.clients("wrong").guests.ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{})); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("ListGuests with a wrong token = %v, want unauthenticated", err)
	}
	if got := get("corpus_raft_applied_index"); got <= applied {
		t.Errorf("raft_applied_index after a write = %v, want more than %v", got, applied)
	}
	if got := metricstest.HistogramCount(t, reg, "corpus_raft_apply_duration_seconds"); got <= applies {
		t.Errorf("raft_apply_duration_seconds count after a write = %d, want more than %d", got, applies)
	}
	create := corpusv1connect.GuestServiceCreateGuestProcedure
	if got := get("corpus_api_requests_total", "procedure", create, "code", "ok"); got != 1 {
		t.Errorf("api_requests_total{CreateGuest, ok} = %v, want 1", got)
	}
	if got := get("corpus_api_requests_total", "procedure", corpusv1connect.GuestServiceListGuestsProcedure, "code", "unauthenticated"); got != 1 {
		t.Errorf("api_requests_total{ListGuests, unauthenticated} = %v, want 1", got)
	}
	if got := metricstest.HistogramCount(t, reg, "corpus_api_request_duration_seconds", "procedure", create); got != 1 {
		t.Errorf("api_request_duration_seconds{CreateGuest} count = %d, want 1", got)
	}
	// No node: the guest waits, seen by the scheduler and the guest count.
	s.waitFor("web pending", func(v *state.Snap) bool { return v.GuestByName("web").GetPendingReason() != "" })
	if got := get("corpus_guests", "state", "pending", "driver", "lxc"); got != 1 {
		t.Errorf("guests{pending, lxc} = %v, want 1", got)
	}
	if got := get("corpus_scheduler_pending_guests"); got != 1 {
		t.Errorf("scheduler_pending_guests = %v, want 1", got)
	}
	if got := get("corpus_scheduler_placements_total", "result", "pending"); got < 1 {
		t.Errorf("scheduler_placements_total{pending} = %v, want at least 1", got)
	}
	if got := get("corpus_certificate_expiry_seconds", "certificate", "replica"); got < float64(coordinator.DefaultCertTTL.Seconds())*0.9 {
		t.Errorf("certificate_expiry_seconds{replica} = %v, want about %v", got, coordinator.DefaultCertTTL.Seconds())
	}
	if get("corpus_certificate_expiry_seconds", "certificate", "cluster_ca") <= 0 {
		t.Errorf("certificate_expiry_seconds{cluster_ca} is not positive")
	}
	// A service: counted by template and state before its agent said.
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "pay", ExternalUrl: "https://pay.example.test"})); err != nil {
		t.Fatal(err)
	}
	if got := get("corpus_services", "template", "external", "state", "unknown"); got != 1 {
		t.Errorf("services{external, unknown} = %v, want 1", got)
	}

	// What a scrape serves passes Prometheus' own lint.
	metricstest.Promtool(t, metricstest.Scrape(t, serveMetrics(t, reg)))
}

// serveMetrics serves reg on a dynamic loopback port until the test
// ends and returns its URL.
func serveMetrics(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	ms, err := metrics.Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ms.Serve(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return ms.URL()
}

// TestGuestStatesStay: every guest state of every driver the nodes
// offer is exported from the start, 0 when no guest is in it, and the
// state a guest left reads 0 instead of vanishing.
func TestGuestStatesStay(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.Metrics = reg })
	ctx := context.Background()
	url := serveMetrics(t, reg)
	n1 := s.enroll("n1")
	n1.report(t)
	want := func(when string, counts map[string]float64) {
		t.Helper()
		exposition := metricstest.Scrape(t, url)
		for _, st := range []string{"pending", "placed", "creating", "starting", "running", "stopping", "stopped", "failed", "deleted", "other"} {
			got, ok := metricstest.Exposed(t, exposition, "corpus_guests", "state", st, "driver", "lxc")
			if !ok || got != counts[st] {
				t.Errorf("%s: corpus_guests{state=%q,driver=\"lxc\"} = %v (exposed: %v), want %v", when, st, got, ok, counts[st])
			}
		}
	}
	want("no guest yet", nil)
	res, err := s.ops().guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.Guest.Id
	s.waitFor("web placed", func(v *state.Snap) bool { return v.Guest(id).GetNodeId() == n1.id })
	n1.report(t, observed(id, state.ObservedRunning))
	s.waitFor("web running", func(v *state.Snap) bool { return v.Guest(id).GetObserved().GetState() == state.ObservedRunning })
	want("web running", map[string]float64{"running": 1})
	if _, err := s.ops().guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "web"})); err != nil {
		t.Fatal(err)
	}
	n1.report(t, observed(id, state.ObservedDeleted))
	s.waitFor("web gone", func(v *state.Snap) bool { return v.Guest(id) == nil })
	want("web gone", nil)
}

// TestReplicaCertificateRenews: a replica renews its own certificate
// two thirds into its life, new handshakes get the new one, and the
// expiry gauge moves with it.
func TestReplicaCertificateRenews(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	var clk clock.Offset
	s := start(t, t.TempDir(), func(c *coordinator.Config) {
		c.Metrics = reg
		c.Clock = &clk
		c.CertTTL = 30 * time.Second
	})
	expiresAt := func() float64 {
		return metricstest.Value(t, reg, "corpus_certificate_expiry_timestamp_seconds", "component", "coordinator", "certificate", "replica")
	}
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", s.APIAddr(), &tls.Config{RootCAs: s.caPool(), ServerName: pki.ServerName})
		if err != nil {
			t.Fatalf("dialing the API: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	first := served()
	if got, want := expiresAt(), float64(first.NotAfter.Unix()); got != want {
		t.Fatalf("expiry timestamp{replica} = %v, want %v, the served certificate's NotAfter", got, want)
	}
	// Two thirds of the 30 s life pass on the replica's clock.
	clk.Add(21 * time.Second)
	testrun.Wait(t, 10*time.Second, "the replica's certificate renewed", func() error {
		if got := expiresAt(); got <= float64(first.NotAfter.Unix()) {
			return fmt.Errorf("expiry timestamp{replica} = %v, still the first certificate's", got)
		}
		return nil
	})
	now := served()
	if now.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("the API still serves the first certificate (serial %s) after renewal", first.SerialNumber)
	}
	if got, want := expiresAt(), float64(now.NotAfter.Unix()); got != want {
		t.Errorf("expiry timestamp{replica} after renewal = %v, want %v, the served certificate's NotAfter", got, want)
	}
}
