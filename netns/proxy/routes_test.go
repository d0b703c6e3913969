package proxy

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"corpus/netns/proxy/h1"
)

// TestAppendHostKey: the lean path keys a Host as matchHost does.
func TestAppendHostKey(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"app.test", "APP.Test:8080", "app.test.", "[::1]:80", "[::1]", "::1", "", "a:b:c", "Host.:"} {
		if got, want := string(h1.AppendHostKey(nil, []byte(h))), matchHost(h); got != want {
			t.Errorf("h1.AppendHostKey(%q) = %q, want %q as matchHost", h, got, want)
		}
	}
}

func TestRoutesValidate(t *testing.T) {
	t.Parallel()
	ok := []string{"10.0.3.5:8080"}
	tests := []struct {
		name   string
		routes Routes
		want   []error // each must be in the chain; nil means valid
		msg    string  // a substring of the message
	}{
		{name: "empty", routes: Routes{}},
		{name: "valid", routes: Routes{
			HTTP: map[string]HTTPRoute{
				"app.example.com":       {Targets: []string{"10.0.3.5:8080", "guest-2.internal:80", "[fd00::5]:443"}},
				"a":                     {Targets: ok},
				"xn--bcher-kva.example": {Targets: ok},
				"1-2.3":                 {Targets: ok},
			},
			TCP: map[int]TCPRoute{1: {Target: "10.0.3.5:5432"}, 65535: {Target: "db:5432"}},
		}},
		{name: "uppercase", routes: Routes{HTTP: map[string]HTTPRoute{"App.example.com": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "must be lowercase"},
		{name: "wildcard", routes: Routes{HTTP: map[string]HTTPRoute{"*.example.com": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "wildcards are not supported"},
		{name: "empty host", routes: Routes{HTTP: map[string]HTTPRoute{"": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "empty"},
		{name: "host with port", routes: Routes{HTTP: map[string]HTTPRoute{"app.test:80": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: `has ':'`},
		{name: "trailing dot", routes: Routes{HTTP: map[string]HTTPRoute{"app.test.": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "trailing dot"},
		{name: "empty label", routes: Routes{HTTP: map[string]HTTPRoute{"app..test": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "empty label"},
		{name: "leading hyphen", routes: Routes{HTTP: map[string]HTTPRoute{"-app.test": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "hyphen"},
		{name: "trailing hyphen", routes: Routes{HTTP: map[string]HTTPRoute{"app-.test": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "hyphen"},
		{name: "underscore", routes: Routes{HTTP: map[string]HTTPRoute{"my_app.test": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: `'_'`},
		{name: "long label", routes: Routes{HTTP: map[string]HTTPRoute{strings.Repeat("a", 64) + ".test": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "longer than 63"},
		{name: "long name", routes: Routes{HTTP: map[string]HTTPRoute{strings.Repeat("a.", 127) + "ab": {Targets: ok}}},
			want: []error{ErrInvalidHost}, msg: "longer than 253"},
		{name: "no targets", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {}}},
			want: []error{ErrNoTargets}},
		{name: "target without port", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{"10.0.3.5"}}}},
			want: []error{ErrInvalidTarget}, msg: "not host:port"},
		{name: "target port zero", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{"10.0.3.5:0"}}}},
			want: []error{ErrInvalidTarget}, msg: "1-65535"},
		{name: "target port too big", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{"10.0.3.5:65536"}}}},
			want: []error{ErrInvalidTarget}, msg: "1-65535"},
		{name: "target port name", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{"10.0.3.5:http"}}}},
			want: []error{ErrInvalidTarget}},
		{name: "target port sign", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{"10.0.3.5:+80"}}}},
			want: []error{ErrInvalidTarget}},
		{name: "target empty host", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{":80"}}}},
			want: []error{ErrInvalidTarget}, msg: "empty host"},
		{name: "target bad host", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{"bad_host:80"}}}},
			want: []error{ErrInvalidTarget, ErrInvalidHost}},
		{name: "target url", routes: Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{"http://10.0.3.5:80"}}}},
			want: []error{ErrInvalidTarget}},
		{name: "tcp port zero", routes: Routes{TCP: map[int]TCPRoute{0: {Target: "10.0.3.5:22"}}},
			want: []error{ErrInvalidPort}, msg: "tcp route 0"},
		{name: "tcp port negative", routes: Routes{TCP: map[int]TCPRoute{-1: {Target: "10.0.3.5:22"}}},
			want: []error{ErrInvalidPort}},
		{name: "tcp port too big", routes: Routes{TCP: map[int]TCPRoute{70000: {Target: "10.0.3.5:22"}}},
			want: []error{ErrInvalidPort}},
		{name: "tcp bad target", routes: Routes{TCP: map[int]TCPRoute{2222: {Target: "10.0.3.5"}}},
			want: []error{ErrInvalidTarget}, msg: "tcp route 2222"},
		{name: "several problems reported together", routes: Routes{
			HTTP: map[string]HTTPRoute{"Bad": {Targets: ok}, "good.test": {Targets: []string{"nope"}}},
			TCP:  map[int]TCPRoute{0: {Target: "10.0.3.5:22"}},
		}, want: []error{ErrInvalidHost, ErrInvalidTarget, ErrInvalidPort}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.routes.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %v", tc.want)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("Validate() = %v, want it to wrap %v", err, w)
				}
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Validate() = %q, want it to mention %q", err, tc.msg)
			}
		})
	}
}

func TestMatchHost(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"app.test", "app.test"},
		{"APP.Test", "app.test"},
		{"app.test:8080", "app.test"},
		{"App.Test:443", "app.test"},
		{"app.test.", "app.test"},
		{"app.test.:80", "app.test"},
		{"127.0.0.1:80", "127.0.0.1"},
		{"[::1]:80", "::1"},
		{"[::1]", "::1"},
		{"::1", "::1"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := matchHost(tc.in); got != tc.want {
			t.Errorf("matchHost(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRoutesAreCopied(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Config{})
	in := httpRoutes("a.test", "10.0.0.1:80")
	mustSetRoutes(t, p, in)
	in.HTTP["a.test"].Targets[0] = "10.0.0.9:80"
	in.HTTP["b.test"] = HTTPRoute{Targets: []string{"10.0.0.2:80"}}

	got := p.Routes()
	want := httpRoutes("a.test", "10.0.0.1:80")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Routes() = %v after changing the caller's copy, want %v", got, want)
	}
	got.HTTP["c.test"] = HTTPRoute{Targets: []string{"10.0.0.3:80"}}
	if _, ok := p.Routes().HTTP["c.test"]; ok {
		t.Fatal("changing the result of Routes() changed the proxy's routes")
	}
}

func TestSetRoutesInvalidChangesNothing(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Config{})
	good := httpRoutes("a.test", "10.0.0.1:80")
	mustSetRoutes(t, p, good)
	err := p.SetRoutes(httpRoutes("a.test", "10.0.0.2:80", "B.test", "10.0.0.3:80"))
	if !errors.Is(err, ErrInvalidHost) {
		t.Fatalf("SetRoutes(invalid) = %v, want ErrInvalidHost", err)
	}
	if got := p.Routes(); !reflect.DeepEqual(got, good) {
		t.Fatalf("Routes() = %v after a rejected SetRoutes, want %v", got, good)
	}
}

// FuzzRoutesValidate checks that Validate never panics, and that every host
// it accepts is matched by the Host headers clients send for it.
func FuzzRoutesValidate(f *testing.F) {
	f.Add("app.example.com", "10.0.3.5:8080", 2222, "App.Example.com:8443")
	f.Add("*.x", "[::1]:1", 0, "")
	f.Add("a-b.c", "host:65535", 65535, "[::1]:80")
	f.Add("", ":", -1, "a.")
	f.Fuzz(func(t *testing.T, host, target string, port int, header string) {
		r := Routes{
			HTTP: map[string]HTTPRoute{host: {Targets: []string{target}}},
			TCP:  map[int]TCPRoute{port: {Target: target}},
		}
		_ = r.Validate()

		got := matchHost(header)
		if strings.ToLower(got) != got {
			t.Fatalf("matchHost(%q) = %q, not lowercase", header, got)
		}
		if validHost(got) == nil && matchHost(got) != got {
			t.Fatalf("matchHost(%q) = %q, not stable", got, matchHost(got))
		}
		if validHost(host) != nil {
			return
		}
		for _, h := range []string{host, strings.ToUpper(host), host + ":80", strings.ToUpper(host) + ".:8080"} {
			if got := matchHost(h); got != host {
				t.Fatalf("matchHost(%q) = %q, want route host %q", h, got, host)
			}
		}
	})
}
