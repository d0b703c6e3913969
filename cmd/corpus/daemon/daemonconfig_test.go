package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"corpus/cmd/corpus/cli"
)

// TestDaemonConfigPrecedence: defaults < file < environment < flags, and
// unknown keys in the file are refused.
func TestDaemonConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("data_dir: /from/file\napi_addr: file:1\nraft_addr: file:2\nlabel:\n  zone: a\nlist: [x, y]\n"), 0o600)
	t.Setenv("CORPUS_T_API_ADDR", "env:1")
	t.Setenv("CORPUS_T_RAFT_ADDR", "env:2")

	var dataDir, api, raft, id string
	var labels map[string]string
	var list []string
	cmd := &cobra.Command{Use: "t", RunE: func(*cobra.Command, []string) error { return nil }}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "/default", "")
	f.StringVar(&api, "api-addr", "default:1", "")
	f.StringVar(&raft, "raft-addr", "default:2", "")
	f.StringVar(&id, "id", "default-id", "")
	f.StringToStringVar(&labels, "label", nil, "")
	f.StringSliceVar(&list, "list", nil, "")
	if err := f.Parse([]string{"--raft-addr", "flag:2"}); err != nil {
		t.Fatal(err)
	}
	if err := applyDaemonConfig(cmd, file, "CORPUS_T_"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"data-dir (file)", dataDir, "/from/file"},
		{"api-addr (env over file)", api, "env:1"},
		{"raft-addr (flag over env)", raft, "flag:2"},
		{"id (default)", id, "default-id"},
		{"label (map from file)", labels["zone"], "a"},
		{"list (sequence from file)", strings.Join(list, ","), "x,y"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}

	os.WriteFile(file, []byte("data_dri: /typo\n"), 0o600)
	if err := applyDaemonConfig(cmd, file, "CORPUS_T_"); err == nil || !strings.Contains(err.Error(), `unknown setting "data_dri"`) {
		t.Errorf("applyDaemonConfig with a typo = %v, want an unknown setting error", err)
	}
}

// TestLogFormat: --log-format picks the slog handler; every event is one
// line, also when a value holds a newline.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flags logFlags
		start string
	}{
		{logFlags{level: "info", format: "text"}, "time="},
		{logFlags{level: "info", format: "json"}, "{"},
		{logFlags{level: "info", json: true}, "{"},
	} {
		var out bytes.Buffer
		l, err := tc.flags.loggerTo(&out)
		if err != nil {
			t.Fatalf("%+v: %v", tc.flags, err)
		}
		l.Info("first", "detail", "two\nlines")
		l.Debug("hidden")
		l.Warn("second")
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], tc.start) || !strings.HasPrefix(lines[1], tc.start) {
			t.Errorf("%+v logged %q, want 2 lines starting %q", tc.flags, out.String(), tc.start)
		}
	}
	if _, err := (&logFlags{level: "info", format: "xml"}).logger(); err == nil {
		t.Errorf("--log-format xml: no error")
	}
}

// TestPackagedConfigs: the default configs the package installs in
// /etc/corpus are accepted by their daemons, as shipped and with every
// commented example setting ("#key: value") switched on.
func TestPackagedConfigs(t *testing.T) {
	for file, newCmd := range map[string]func(*cli.Globals) *cobra.Command{
		"coordinator.yaml": newCoordinatorCmd,
		"agent.yaml":       newAgentCmd,
	} {
		src, err := os.ReadFile(filepath.Join("..", "..", "..", "packaging", file))
		if err != nil {
			t.Fatal(err)
		}
		var on []string
		examples := 0
		for _, line := range strings.Split(string(src), "\n") {
			body, commented := strings.CutPrefix(line, "#")
			switch {
			case commented && body != "" && body[0] != ' ':
				examples++
				on = append(on, body)
			case commented && strings.HasPrefix(body, "  ") && len(on) > 0 && strings.HasSuffix(on[len(on)-1], ":"):
				on = append(on, body) // a nested example value
			default:
				on = append(on, line)
			}
		}
		if examples < 5 {
			t.Errorf("%s shows %d example settings, want the main ones commented in", file, examples)
		}
		for name, body := range map[string]string{"as shipped": string(src), "examples on": strings.Join(on, "\n")} {
			p := filepath.Join(t.TempDir(), file)
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := applyDaemonConfig(newCmd(&cli.Globals{}), p, "CORPUS_TEST_UNSET_"); err != nil {
				t.Errorf("%s (%s): %v", file, name, err)
			}
		}
	}
}
