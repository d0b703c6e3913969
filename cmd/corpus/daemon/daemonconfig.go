package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// applyDaemonConfig fills a daemon's flags from its config file and the
// environment: defaults < file < environment < flags. The file is flat
// YAML whose keys are flag names with '_' for '-' ("data_dir: /srv/x");
// an unknown key is an error, so a typo never goes unnoticed. The
// environment variable of flag "data-dir" is PREFIX_DATA_DIR.
func applyDaemonConfig(cmd *cobra.Command, path, envPrefix string) error {
	fs := cmd.Flags()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading config file: %w", err)
		}
		// A map takes any key: the loop below refuses the unknown ones.
		var m map[string]yaml.Node
		if err := yaml.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			node := m[k]
			f := fs.Lookup(strings.ReplaceAll(k, "_", "-"))
			if f == nil || f.Name == "config" {
				return fmt.Errorf("%s: unknown setting %q", path, k)
			}
			if f.Changed {
				continue
			}
			if err := setFromYAML(f, &node); err != nil {
				return fmt.Errorf("%s: %s: %w", path, k, err)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && !f.Changed && err == nil {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}

func setFromYAML(f *pflag.Flag, node *yaml.Node) error {
	switch node.Kind {
	case yaml.ScalarNode:
		return f.Value.Set(node.Value)
	case yaml.SequenceNode:
		var items []string
		if err := node.Decode(&items); err != nil {
			return err
		}
		for _, it := range items {
			if err := f.Value.Set(it); err != nil {
				return err
			}
		}
		return nil
	case yaml.MappingNode:
		var kv map[string]string
		if err := node.Decode(&kv); err != nil {
			return err
		}
		keys := make([]string, 0, len(kv))
		for k := range kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := f.Value.Set(k + "=" + kv[k]); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unsupported value")
}

// logFlags are the logging flags of the daemons.
type logFlags struct {
	level  string
	format string
	json   bool // the older --log-json
}

func (l *logFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text (key=value) or json, one event a line")
	fs.BoolVar(&l.json, "log-json", false, "log as JSON lines")
	fs.MarkDeprecated("log-json", "use --log-format json")
}

func (l *logFlags) logger() (*slog.Logger, error) {
	return l.loggerTo(os.Stderr)
}

func (l *logFlags) loggerTo(w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	format := l.format
	if l.json {
		format = "json"
	}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", l.format)
}
