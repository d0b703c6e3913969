package cli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// deposed answers the first DeleteRecord as a leader deposed while
// committing it does, and every later one "not found".
type deposed struct {
	corpusv1connect.UnimplementedDnsServiceHandler
	calls int
	cut   bool // the first answer says the write may have taken effect
}

func (d *deposed) DeleteRecord(context.Context, *connect.Request[corpusv1.DeleteRecordRequest]) (*connect.Response[corpusv1.DeleteRecordResponse], error) {
	d.calls++
	if d.calls == 1 && d.cut {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("this coordinator is "+rpc.NotLeaderPhrase+
			" (leadership was lost while the write was being committed: "+rpc.MaybeDonePhrase+")"))
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("record r1 not found"))
}

// TestDeleteCutShort: a delete whose first try a leader change cut short,
// asked again and found gone, succeeds saying so (its first try may
// have done it); a delete of what never was still says not found.
func TestDeleteCutShort(t *testing.T) {
	for _, cut := range []bool{true, false} {
		d := &deposed{cut: cut}
		mux := http.NewServeMux()
		mux.Handle(corpusv1connect.NewDnsServiceHandler(d))
		srv, caFile := serveTLS(t, mux)
		c := &cliTarget{t: t, flags: []string{"--address", srv.URL, "--ca-cert", caFile, "--token", "cusr_x_y", "--config-file", filepath.Join(t.TempDir(), "config.yaml")}}
		out, err := c.run("", "dns", "delete", "r1")
		jsonOut, jsonErr := c.run("", "--json", "dns", "delete", "r1")
		srv.Close()
		switch {
		case cut && (err != nil || !strings.Contains(out, "already gone")):
			t.Errorf("cut short, then not found: %q, %v; want success, already gone", out, err)
		case cut && (jsonErr == nil || d.calls != 3):
			// The --json run's first try is not cut short: not found.
			t.Errorf("a second delete: %q, %v after %d calls; want not found", jsonOut, jsonErr, d.calls)
		case !cut && (err == nil || !strings.Contains(describe(err), "not found")):
			t.Errorf("not found at once: %q, %v; want not found", out, err)
		}
	}
}

// serveTLS serves h over TLS with a coordinator's certificate of a CA of
// its own, written to the file it returns.
func serveTLS(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	caPEM, caKey, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(caPEM, caKey)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, _, err := ca.IssueKeyPair(pki.Request{Role: pki.RoleCoordinator, ID: "c1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pki.KeyPair(certPEM, keyPEM, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = pki.ServerConfig(ca.Pool(), pki.NewKeys(kp), false)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, caFile
}
