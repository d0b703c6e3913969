package cli

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	corpusv1 "corpus/proto/corpus/v1"
)

// defaultLogTail is how many lines logs shows without --tail or --since.
const defaultLogTail = 100

// logFilter are the filters of both logs commands.
type logFilter struct {
	sources []string
	process string
	since   string
	tail    int
	follow  bool
	// raw prints lines as their process wrote them, control characters
	// and all (escaped otherwise: see termSafe).
	raw bool
}

func (f *logFilter) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringSliceVar(&f.sources, "source", nil, "app (the processes' output), deploy (the pipeline's steps), system (what corpus says); all by default")
	fs.StringVar(&f.process, "process", "", "only the lines of this process type (web, worker)")
	fs.StringVar(&f.since, "since", "", "only lines from this long ago (10m, 2h) or this time (RFC 3339) on")
	fs.IntVar(&f.tail, "tail", -1, fmt.Sprintf("the last N lines (default %d without --since; 0: every line kept)", defaultLogTail))
	fs.BoolVarP(&f.follow, "follow", "f", false, "go on with new lines as they come (across deploys, restarts and moves) until the guest is deleted or Ctrl-C")
	fs.BoolVar(&f.raw, "raw", false, "print control characters (escape sequences) as the process wrote them instead of escaped as \\x1b: lets the guest's output drive your terminal")
}

func (f *logFilter) request(name string) (*corpusv1.GuestLogsRequest, error) {
	req := &corpusv1.GuestLogsRequest{Name: name, Sources: f.sources, Process: f.process, Follow: f.follow}
	switch {
	case f.tail >= 0:
		req.Tail = int32(f.tail)
	case f.since == "":
		req.Tail = defaultLogTail
	}
	if f.since != "" {
		if d, err := time.ParseDuration(f.since); err == nil {
			if d <= 0 {
				return nil, fmt.Errorf("--since %s: want a positive duration", f.since)
			}
			req.Since = timestamppb.New(time.Now().Add(-d))
		} else if t, err := time.Parse(time.RFC3339, f.since); err == nil {
			req.Since = timestamppb.New(t)
		} else {
			return nil, fmt.Errorf("--since %q: want a duration (10m) or an RFC 3339 time", f.since)
		}
	}
	return req, nil
}

// printLogs prints a log stream until it ends: a line per log line,
// "TIME SOURCE[PROCESS RELEASE]: LINE", or JSON lines with --json. A
// line's control characters are escaped unless raw: what a guest prints
// must not drive the terminal of whoever reads its logs.
func (g *Globals) printLogs(stream *connect.ServerStreamForClient[corpusv1.LogLine], err error, raw bool) error {
	if err != nil {
		return err
	}
	defer stream.Close()
	jsonLine := protojson.MarshalOptions{UseProtoNames: true}
	for stream.Receive() {
		l := stream.Msg()
		if g.json {
			b, err := jsonLine.Marshal(l)
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, string(b))
			continue
		}
		who := l.Source
		switch {
		case l.Process != "" && l.Release != "":
			who += "[" + l.Process + " " + l.Release + "]"
		case l.Process != "":
			who += "[" + l.Process + "]"
		case l.Release != "":
			who += "[" + l.Release + "]"
		}
		line := l.Line
		if !raw {
			line = termSafe(line)
		}
		fmt.Fprintf(g.stdout, "%s %s: %s\n", l.Time.AsTime().Local().Format("2006-01-02T15:04:05.000Z07:00"), who, line)
	}
	if err := stream.Err(); err != nil && !(connect.CodeOf(err) == connect.CodeCanceled) {
		return err
	}
	return nil
}

func newLogsCmd(g *Globals) *cobra.Command {
	var (
		f   logFilter
		env string
	)
	cmd := &cobra.Command{
		Use:   "logs PROJECT [--env ENV] [--process web] [-f] [--tail N] [--since 10m] [--source app,deploy,system]",
		Short: "Show a project's logs: its processes' output, its deploys' steps, what corpus says; -f follows",
		Example: `  corpus logs site -f
  corpus logs site --env prod --process web --since 1h
  corpus logs site --source deploy --tail 50
  corpus logs site --json | jq -r .line`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			filter, err := f.request("")
			if err != nil {
				return err
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			stream, err := c.Projects.ProjectLogs(cmd.Context(), connect.NewRequest(&corpusv1.ProjectLogsRequest{Project: args[0], Env: env, Filter: filter}))
			return g.printLogs(stream, err, f.raw)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	return cmd
}

func newGuestLogsCmd(g *Globals) *cobra.Command {
	var f logFilter
	cmd := &cobra.Command{
		Use:   "logs NAME [--process web] [-f] [--tail N] [--since 10m] [--source app,deploy,system]",
		Short: "Show a guest's logs (corpus logs PROJECT shows a project's)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(args[0])
			if err != nil {
				return err
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			stream, err := c.Guests.GuestLogs(cmd.Context(), connect.NewRequest(req))
			return g.printLogs(stream, err, f.raw)
		},
	}
	f.add(cmd)
	return cmd
}

// termSafe returns s with what a terminal would act on written out
// instead: C0 control characters other than tab and newline, DEL and C1
// control characters as \xNN (ESC is \x1b, so "\x1b[2J" shows rather
// than clears the screen), and bytes that are not UTF-8 (an 8-bit C1
// control to some terminals) as \xNN too. Everything else, non-ASCII
// text included, is kept as it is.
func termSafe(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || r != '\t' && r != '\n' && unicode.IsControl(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1: // not UTF-8
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r == '\t' || r == '\n' || !unicode.IsControl(r):
			b.WriteString(s[i : i+n])
		default: // C0, DEL, C1 (U+0080-U+009F)
			fmt.Fprintf(&b, "\\x%02x", r)
		}
		i += n
	}
	return b.String()
}
