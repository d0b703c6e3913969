package cli

import (
	"fmt"
	"time"

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
}

func (f *logFilter) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringSliceVar(&f.sources, "source", nil, "app (the processes' output), deploy (the pipeline's steps), system (what corpus says); all by default")
	fs.StringVar(&f.process, "process", "", "only the lines of this process type (web, worker)")
	fs.StringVar(&f.since, "since", "", "only lines from this long ago (10m, 2h) or this time (RFC 3339) on")
	fs.IntVar(&f.tail, "tail", -1, fmt.Sprintf("the last N lines (default %d without --since; 0: every line kept)", defaultLogTail))
	fs.BoolVarP(&f.follow, "follow", "f", false, "go on with new lines as they come (across deploys, restarts and moves) until the guest is deleted or Ctrl-C")
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
// "TIME SOURCE[PROCESS RELEASE]: LINE", or JSON lines with --json.
func (g *globals) printLogs(stream *connect.ServerStreamForClient[corpusv1.LogLine], err error) error {
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
		fmt.Fprintf(g.stdout, "%s %s: %s\n", l.Time.AsTime().Local().Format("2006-01-02T15:04:05.000Z07:00"), who, l.Line)
	}
	if err := stream.Err(); err != nil && !(connect.CodeOf(err) == connect.CodeCanceled) {
		return err
	}
	return nil
}

func newLogsCmd(g *globals) *cobra.Command {
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
			c, err := g.clients()
			if err != nil {
				return err
			}
			return g.printLogs(c.projects.ProjectLogs(cmd.Context(), connect.NewRequest(&corpusv1.ProjectLogsRequest{Project: args[0], Env: env, Filter: filter})))
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	return cmd
}

func newGuestLogsCmd(g *globals) *cobra.Command {
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
			c, err := g.clients()
			if err != nil {
				return err
			}
			return g.printLogs(c.guests.GuestLogs(cmd.Context(), connect.NewRequest(req)))
		},
	}
	f.add(cmd)
	return cmd
}
