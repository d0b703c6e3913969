package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

func TestRetryWithoutLeader(t *testing.T) {
	noLeader := connect.NewError(connect.CodeUnavailable, errors.New("this coordinator is not the raft leader (no leader is elected yet)"))
	busy := connect.NewError(connect.CodeUnavailable, errors.New("the coordinators are busy: the leader's write queue stayed full, the write was not taken (retry shortly)"))
	other := connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	// What a coordinator answers: a Retry detail, whatever the words.
	typed := Unavailable(errors.New("no leader"), corpusv1.RetryNotLeader)
	for _, tc := range []struct {
		name  string
		errs  []error
		calls int
		ok    bool
	}{
		{"election then success", []error{typed, typed, nil}, 3, true},
		// A coordinator older than Retry details says why in words only.
		{"election, said in words, then success", []error{noLeader, noLeader, nil}, 3, true},
		{"a busy leader, said in words, then success", []error{busy, nil}, 2, true},
		{"other unavailability is not retried", []error{other, nil}, 1, false},
		{"business errors are not retried", []error{connect.NewError(connect.CodeAlreadyExists, errors.New("x")), nil}, 1, false},
	} {
		calls := 0
		next := func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			err := tc.errs[calls]
			calls++
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(&struct{}{}), nil
		}
		_, err := RetryWithoutLeader(5*time.Second)(next)(context.Background(), connect.NewRequest(&struct{}{}))
		if calls != tc.calls || (err == nil) != tc.ok {
			t.Errorf("%s: %d calls, err %v; want %d calls, ok %v", tc.name, calls, err, tc.calls, tc.ok)
		}
	}
	// It gives up at its deadline.
	start := time.Now()
	always := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, noLeader }
	if _, err := RetryWithoutLeader(300*time.Millisecond)(always)(context.Background(), connect.NewRequest(&struct{}{})); err == nil || time.Since(start) > testrun.D(2*time.Second) {
		t.Errorf("retrying forever: %v after %s", err, time.Since(start))
	}
}

// TestErrorLog: server errors become one slog event each; handshake
// errors are left out.
func TestErrorLog(t *testing.T) {
	var out bytes.Buffer
	l := ErrorLog(slog.New(slog.NewJSONHandler(&out, nil)))
	l.Printf("http: TLS handshake error from 10.0.0.9:5555: EOF")
	l.Printf("http: Accept error: too many open files\nretrying")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"WARN"`) || !strings.Contains(lines[0], `too many open files\nretrying`) {
		t.Errorf("logged %q, want one JSON event for the accept error", out.String())
	}
}

// deleter answers DeleteRecord with errs in turn, then "not found".
type deleter struct {
	corpusv1connect.UnimplementedDnsServiceHandler
	errs []error
}

func (d *deleter) DeleteRecord(context.Context, *connect.Request[corpusv1.DeleteRecordRequest]) (*connect.Response[corpusv1.DeleteRecordResponse], error) {
	if len(d.errs) > 0 {
		err := d.errs[0]
		d.errs = d.errs[1:]
		return nil, err
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("record r1 not found"))
}

// TestGone: a removal asked again after an answer that says the write
// may have taken effect, and then not found, is Gone; not found after
// a try that surely did nothing (no leader yet) is not, nor at once.
func TestGone(t *testing.T) {
	// An older coordinator's answers, in words only.
	maybe := connect.NewError(connect.CodeUnavailable, errors.New("this coordinator is "+NotLeaderPhrase+" (leadership was lost while the write was being committed: "+MaybeDonePhrase+")"))
	noLeader := connect.NewError(connect.CodeUnavailable, errors.New("this coordinator is "+NotLeaderPhrase+" (no leader is elected yet)"))
	// Today's, which the detail alone marks.
	typedMaybe := Unavailable(fmt.Errorf("leadership lost: %w", ErrMaybeDone), corpusv1.RetryNotLeader)
	typedBusy := Unavailable(errors.New("queue full"), corpusv1.RetryBusy)
	for _, tc := range []struct {
		name string
		errs []error
		gone bool
	}{
		{"cut short, then not found", []error{maybe}, true},
		{"cut short, no leader, then not found", []error{maybe, noLeader}, true},
		{"no leader, then not found", []error{noLeader}, false},
		{"cut short (detail), then not found", []error{typedMaybe}, true},
		{"cut short (detail), busy (detail), then not found", []error{typedMaybe, typedBusy}, true},
		{"busy (detail), then not found", []error{typedBusy}, false},
		{"not found at once", nil, false},
	} {
		mux := http.NewServeMux()
		mux.Handle(corpusv1connect.NewDnsServiceHandler(&deleter{errs: tc.errs}))
		srv := httptest.NewServer(mux)
		c := corpusv1connect.NewDnsServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(RetryWithoutLeader(5*time.Second)))
		_, err := c.DeleteRecord(context.Background(), connect.NewRequest(&corpusv1.DeleteRecordRequest{Id: "r1"}))
		srv.Close()
		if connect.CodeOf(err) != connect.CodeNotFound || Gone(err) != tc.gone {
			t.Errorf("%s: %v, Gone %t; want not found, Gone %t", tc.name, err, Gone(err), tc.gone)
		}
	}
}

// TestUnreachable: a call to a port nothing listens on is unreachable,
// with the system's cause; an answer from a server is not, even one
// that tells of its own refused connection (the coordinator relaying
// an agent's refusal).
func TestUnreachable(t *testing.T) {
	t.Parallel()
	const closed = "127.0.0.1:1" // nothing listens on port 1
	mux := http.NewServeMux()
	mux.Handle("/corpus.test/Call", connect.NewUnaryHandler("/corpus.test/Call",
		func(context.Context, *connect.Request[corpusv1.Retry]) (*connect.Response[corpusv1.Retry], error) {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 10.0.0.2:7402: connect: connection refused"))
		}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	call := func(addr string) error {
		c := connect.NewClient[corpusv1.Retry, corpusv1.Retry](HTTPClient(nil), "http://"+addr+"/corpus.test/Call")
		_, err := c.CallUnary(context.Background(), connect.NewRequest(&corpusv1.Retry{}))
		return err
	}
	for _, tc := range []struct {
		name      string
		err       error
		cause     string
		reachable bool
	}{
		{"nothing listens", call(closed), "connection refused", false},
		{"the server answered with a refusal of its own", call(strings.TrimPrefix(srv.URL, "http://")), "", true},
		{"no error", nil, "", true},
		{"an error made here", connect.NewError(connect.CodeUnavailable, errors.New("connection refused")), "", true},
	} {
		if cause, ok := Unreachable(tc.err); ok == tc.reachable || cause != tc.cause {
			t.Errorf("%s: Unreachable(%v) = %q, %v; want %q, %v", tc.name, tc.err, cause, ok, tc.cause, !tc.reachable)
		}
	}
}

func TestSpecificHost(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.1:7400": "10.0.0.1", "[fd00::1]:7400": "fd00::1", "coord.example:7400": "coord.example", "127.0.0.1:7400": "127.0.0.1",
		"0.0.0.0:7400": "", "[::]:7400": "", ":7400": "", "": "", "no-port": "",
	} {
		host, ok := SpecificHost(addr)
		if host != want || ok != (want != "") {
			t.Errorf("SpecificHost(%q) = %q, %v; want %q", addr, host, ok, want)
		}
	}
}
