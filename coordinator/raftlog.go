package coordinator

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is the hclog logger Raft wants, writing through logger: one
// slog event per Raft message, in the daemon's log format. Raft's
// warnings and errors are kept; its chatter below is dropped.
func raftLogger(logger *slog.Logger) hclog.Logger {
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: io.Discard})
	il.RegisterSink(hclogSink{logger.With("component", "raft")})
	return il
}

// hclogSink hands hclog messages to slog.
type hclogSink struct{ logger *slog.Logger }

func (s hclogSink) Accept(_ string, level hclog.Level, msg string, args ...any) {
	lv := slog.LevelWarn
	switch {
	case level < hclog.Warn:
		return // sinks see every level
	case level >= hclog.Error:
		lv = slog.LevelError
	}
	attrs := make([]slog.Attr, 0, len(args)/2)
	for i := 0; i+1 < len(args); i += 2 {
		attrs = append(attrs, slog.Any(fmt.Sprint(args[i]), args[i+1]))
	}
	s.logger.LogAttrs(context.Background(), lv, msg, attrs...)
}
