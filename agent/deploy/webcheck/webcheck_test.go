package webcheck

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWait: a web that answers 503 at first is asked again until it
// answers well; a redirect is an answer; one that never answers well
// ends in ErrNoAnswer, naming its last answer.
func TestWait(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case r.URL.Path == "/never" || asked.Add(1) < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ok := func(code int) bool { return code < 400 }

	if status, err := Wait(t.Context(), srv.URL+"/", time.Minute, ok); err != nil || status != "200 OK" {
		t.Errorf("Wait = %q, %v; want 200 OK", status, err)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("asked %d times, want 3 (two 503s, then 200)", n)
	}
	if status, err := Wait(t.Context(), srv.URL+"/moved", time.Minute, ok); err != nil || status != "302 Found" {
		t.Errorf("Wait on a redirect = %q, %v; want 302 Found, not followed", status, err)
	}
	_, err := Wait(t.Context(), srv.URL+"/never", 50*time.Millisecond, ok)
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("Wait on a web that never answers well = %v, want ErrNoAnswer", err)
	}
	if want := "503 Service Unavailable"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the last answer %q", err, want)
	}
}

// TestWaitListens: a web that does not listen yet (connections refused)
// is asked until it listens and answers.
func TestWaitListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond) // asked meanwhile: refused
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}()
	status, err := Wait(t.Context(), "http://"+addr+"/", time.Minute, func(code int) bool { return code < 400 })
	<-done
	if err != nil || status != "200 OK" {
		t.Errorf("Wait on a web listening late = %q, %v; want 200 OK", status, err)
	}
}
