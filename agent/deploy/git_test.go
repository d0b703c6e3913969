package deploy

import "testing"

func TestParseGitCommand(t *testing.T) {
	for _, tc := range []struct{ cmd, service, project, env string }{
		{"git-receive-pack 'hello'", "git-receive-pack", "hello", ""},
		{"git-receive-pack '/hello.git'", "git-receive-pack", "hello", ""},
		{"git-upload-pack 'hello/prod'", "git-upload-pack", "hello", "prod"},
		{"git receive-pack \"hello/\"", "git-receive-pack", "hello", ""},
	} {
		s, p, e, err := parseGitCommand(tc.cmd)
		if err != nil || s != tc.service || p != tc.project || e != tc.env {
			t.Errorf("parseGitCommand(%q) = %q %q %q %v", tc.cmd, s, p, e, err)
		}
	}
	for _, bad := range []string{"", "sh -c id", "git-receive-pack '../etc'", "git-receive-pack 'a;b'", "git-receive-pack 'hello/qa'", "git-upload-archive 'hello'", "git-receive-pack '-x'"} {
		if _, _, _, err := parseGitCommand(bad); err == nil {
			t.Errorf("parseGitCommand(%q) accepted", bad)
		}
	}
}
