//go:build linux

package libvirt

import (
	"slices"
	"testing"

	"corpus/drivers"
)

func TestExecArgv(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  drivers.ExecRequest
		want []string
	}{
		{"plain", drivers.ExecRequest{Argv: []string{"ls", "-l"}}, []string{"ls", "-l"}},
		{"dir", drivers.ExecRequest{Argv: []string{"ls"}, Dir: "/srv/a b;rm -rf /"},
			[]string{"/bin/sh", "-c", `cd -- "$1" && shift && exec "$@"`, "sh", "/srv/a b;rm -rf /", "ls"}},
		{"user", drivers.ExecRequest{Argv: []string{"id"}, UID: 1000, GID: 100},
			[]string{"setpriv", "--reuid=1000", "--regid=100", "--clear-groups", "--", "id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := execArgv(tc.req); !slices.Equal(got, tc.want) {
				t.Errorf("execArgv = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestExecEnv(t *testing.T) {
	got := execEnv([]envXML{{Name: "A", Value: "guest"}, {Name: "B", Value: "guest"}}, map[string]string{"B": "req", "PATH": "/bin"})
	want := []string{"A=guest", "B=req", "HOME=/root", "PATH=/bin"}
	if !slices.Equal(got, want) {
		t.Errorf("execEnv = %q, want %q", got, want)
	}
}
