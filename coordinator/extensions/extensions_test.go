package extensions

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corpusv1 "corpus/proto/corpus/v1"
)

func ext(name string, priority int32, after, before []string) *corpusv1.Extension {
	return &corpusv1.Extension{Name: name, Priority: priority, After: after, Before: before, Kind: corpusv1.ExtensionMutate, On: []string{corpusv1.OnGuestCreate}}
}

func nameList(es []*corpusv1.Extension) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return strings.Join(out, " ")
}

func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []*corpusv1.Extension
		want string
	}{
		{"priority then name", []*corpusv1.Extension{ext("b", 0, nil, nil), ext("a", 0, nil, nil), ext("c", 5, nil, nil)}, "c a b"},
		{"after wins over priority", []*corpusv1.Extension{ext("low", 0, nil, nil), ext("high", 9, []string{"low"}, nil)}, "low high"},
		{"before wins over name", []*corpusv1.Extension{ext("a", 0, nil, nil), ext("z", 0, nil, []string{"a"})}, "z a"},
		{"a chain across both", []*corpusv1.Extension{ext("defaults", 0, nil, []string{"labels"}), ext("labels", 0, nil, nil), ext("quota", 10, []string{"labels"}, nil)}, "defaults labels quota"},
		{"unknown names ignored", []*corpusv1.Extension{ext("a", 0, []string{"ghost"}, []string{"phantom"})}, "a"},
	} {
		got, err := Order(tc.in)
		if err != nil || nameList(got) != tc.want {
			t.Errorf("%s: Order = %q, %v; want %q", tc.name, nameList(got), err, tc.want)
		}
	}
	_, err := Order([]*corpusv1.Extension{ext("a", 0, []string{"c"}, nil), ext("b", 0, []string{"a"}, nil), ext("c", 0, []string{"b"}, nil), ext("free", 0, nil, nil)})
	if err == nil || !strings.Contains(err.Error(), "a -> b -> c -> a") {
		t.Errorf("a cycle: %v, want it named a -> b -> c -> a", err)
	}
	_, err = Order([]*corpusv1.Extension{ext("x", 0, nil, []string{"y"}), ext("y", 0, nil, []string{"x"})})
	if err == nil || !strings.Contains(err.Error(), "x -> y -> x") {
		t.Errorf("a cycle by before: %v", err)
	}
}

func TestCheck(t *testing.T) {
	good := func() *corpusv1.Extension {
		return &corpusv1.Extension{Name: "mem", Url: "https://hooks.example/mem", Kind: corpusv1.ExtensionMutate, On: []string{corpusv1.OnGuestCreate, corpusv1.OnProjectCreate}}
	}
	e := good()
	if err := Check(e); err != nil || e.FailurePolicy != corpusv1.FailurePolicyFail || e.TimeoutMs != corpusv1.DefaultExtensionTimeout.Milliseconds() {
		t.Fatalf("Check(good) = %v, defaults %q %d", err, e.FailurePolicy, e.TimeoutMs)
	}
	for what, change := range map[string]func(*corpusv1.Extension){
		"a plain http url":           func(e *corpusv1.Extension) { e.Url = "http://hooks.example/mem" },
		"no url":                     func(e *corpusv1.Extension) { e.Url = "" },
		"an unknown kind":            func(e *corpusv1.Extension) { e.Kind = "transform" },
		"an unknown event":           func(e *corpusv1.Extension) { e.On = []string{"guest.explode"} },
		"no event":                   func(e *corpusv1.Extension) { e.On = nil },
		"lint on guest.create":       func(e *corpusv1.Extension) { e.Kind = corpusv1.ExtensionLint },
		"mutate on deploy":           func(e *corpusv1.Extension) { e.On = []string{corpusv1.OnDeploy} },
		"after itself":               func(e *corpusv1.Extension) { e.After = []string{"mem"} },
		"a bad name":                 func(e *corpusv1.Extension) { e.Name = "Mem!" },
		"a bad policy":               func(e *corpusv1.Extension) { e.FailurePolicy = "maybe" },
		"a timeout over the max":     func(e *corpusv1.Extension) { e.TimeoutMs = 31000 },
		"an ordered validator":       func(e *corpusv1.Extension) { e.Kind = corpusv1.ExtensionValidate; e.Before = []string{"x"} },
		"an event named twice":       func(e *corpusv1.Extension) { e.On = []string{corpusv1.OnGuestCreate, corpusv1.OnGuestCreate} },
		"a bad name in after/before": func(e *corpusv1.Extension) { e.After = []string{"No Such"} },
	} {
		e := good()
		change(e)
		if err := Check(e); err == nil {
			t.Errorf("Check accepted %s", what)
		}
	}
}

func TestVerifier(t *testing.T) {
	secret := []byte("0123456789abcdef-shared")
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"kind":"guest.create"}`)
	sig := Sign(secret, now, body)
	v := &Verifier{Secret: secret, Window: time.Minute}
	if err := v.Verify(sig, body, now.Add(10*time.Second)); err != nil {
		t.Fatalf("a fresh call: %v", err)
	}
	if err := v.Verify(sig, body, now.Add(20*time.Second)); !errors.Is(err, ErrReplayed) {
		t.Errorf("the same call again: %v, want ErrReplayed", err)
	}
	if err := (&Verifier{Secret: secret, Window: time.Minute}).Verify(sig, body, now.Add(2*time.Minute)); !errors.Is(err, ErrStale) {
		t.Errorf("a call replayed after the window: %v, want ErrStale", err)
	}
	if err := v.Verify(Sign(secret, now, body), []byte(`{"kind":"project.create"}`), now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed body: %v, want ErrBadSignature", err)
	}
	if err := v.Verify(Sign([]byte("another-secret-of-16"), now, body), body, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another secret: %v", err)
	}
	if err := v.Verify("v1=abc", body, now); !errors.Is(err, ErrNoSignature) {
		t.Errorf("no time: %v", err)
	}
}

// TestCallFailures: every way an extension can fail is a CallError with
// its reason, within the timeout; five in a row open the breaker.
func TestCallFailures(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte(`{"allowed": true}`))
		case "/hang":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		case "/garbage":
			w.Write([]byte(`<html>not json</html>`))
		case "/undecided":
			w.Write([]byte(`{"message": "maybe"}`))
		case "/big":
			w.Write([]byte(`{"allowed": true, "message": "`))
			w.Write([]byte(strings.Repeat("x", MaxAnswerBytes)))
			w.Write([]byte(`"}`))
		case "/500":
			http.Error(w, "boom", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	ca := pemOf(srv.Certificate().Raw)
	c := NewCaller(nil, func() *tls.Certificate { return nil })
	call := func(name, path string) (*Answer, error) {
		// Only the hang is meant to run out of time; a loaded machine
		// may take a while over the megabyte.
		timeout := int64(10000)
		if path == "/hang" {
			timeout = 300
		}
		e := &corpusv1.Extension{Name: name, Url: srv.URL + path, CaPem: ca, TimeoutMs: timeout, Kind: corpusv1.ExtensionValidate, On: []string{corpusv1.OnGuestCreate}}
		return c.Call(context.Background(), e, nil, Request{Kind: corpusv1.OnGuestCreate, Object: []byte(`{}`)})
	}
	if ans, err := call("ok", "/ok"); err != nil || !*ans.Allowed {
		t.Fatalf("ok: %v, %v", ans, err)
	}
	for path, reason := range map[string]string{"/hang": "timeout", "/garbage": "bad_answer", "/undecided": "bad_answer", "/big": "bad_answer", "/500": "error"} {
		start := time.Now()
		_, err := call(strings.TrimPrefix(path, "/"), path)
		var ce *CallError
		if !errors.As(err, &ce) || ce.Reason != reason {
			t.Errorf("%s: %v, want a %s CallError", path, err, reason)
		}
		if d := time.Since(start); path == "/hang" && d > 3*time.Second {
			t.Errorf("%s took %s", path, d)
		}
	}
	// An extension whose certificate the CA does not vouch for.
	e := &corpusv1.Extension{Name: "impostor", Url: srv.URL + "/ok", CaPem: pemOf(mustOtherCert(t)), TimeoutMs: 300}
	if _, err := c.Call(context.Background(), e, nil, Request{}); err == nil {
		t.Error("a call to a server the CA does not vouch for succeeded")
	}
	// Down: five failures open the breaker; it then fails at once.
	down := &corpusv1.Extension{Name: "down", Url: "https://127.0.0.1:1/", TimeoutMs: 300}
	for range breakAfter {
		c.Call(context.Background(), down, nil, Request{})
	}
	_, err := c.Call(context.Background(), down, nil, Request{})
	var ce *CallError
	if !errors.As(err, &ce) || ce.Reason != "open" {
		t.Errorf("after %d failures: %v, want the breaker open", breakAfter, err)
	}
}

// TestSignedCallsAskedTwice: the same request called twice within one
// second (a write asked again after an election runs its admission
// again) is two calls to an extension that refuses replays, not a call
// and its replay: each call has a uid of its own.
func TestSignedCallsAskedTwice(t *testing.T) {
	secret := []byte("0123456789abcdef-shared")
	v := &Verifier{Secret: secret, Window: time.Minute}
	now := time.Unix(1_800_000_000, 0)
	var uids []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := v.Verify(r.Header.Get(SignatureHeader), body, now); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var req Request
		json.Unmarshal(body, &req)
		uids = append(uids, req.UID)
		w.Write([]byte(`{"allowed": true}`))
	}))
	defer srv.Close()
	c := NewCaller(nil, func() *tls.Certificate { return nil })
	c.Now = func() time.Time { return now } // both calls in one second
	e := &corpusv1.Extension{Name: "signed", Url: srv.URL, CaPem: pemOf(srv.Certificate().Raw), TimeoutMs: 10000, Kind: corpusv1.ExtensionValidate, On: []string{corpusv1.OnGuestCreate}}
	for i := range 2 {
		if _, err := c.Call(context.Background(), e, secret, Request{Kind: corpusv1.OnGuestCreate, User: "alice", Object: []byte(`{"name":"web"}`)}); err != nil {
			t.Fatalf("call %d of the same request: %v", i+1, err)
		}
	}
	if len(uids) != 2 || uids[0] == "" || uids[0] == uids[1] {
		t.Errorf("uids of the two calls = %q, want two different ones", uids)
	}
}
