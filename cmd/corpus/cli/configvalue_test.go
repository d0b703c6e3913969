package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestConfigValueSizes: a value over the limit is refused with its real
// size and the limit in human units: from stdin by the CLI before
// anything is sent (it was cut to 1 MiB, sent, and reported as 1048576
// bytes), and by the API for a client that sends it.
func TestConfigValueSizes(t *testing.T) {
	c := startCoordinator(t)
	c.want("project create hello --detach")

	big := strings.Repeat("x", 10<<20)
	for _, args := range [][]string{
		{"config", "set", "hello", "BIG=-", "--no-restart"},
		{"service", "create", "pay", "--external", "https://pay.example.test", "--secret", "BIG=-"},
	} {
		out, err := c.run(big, args...)
		if err == nil || !strings.Contains(err.Error(), "the value of BIG on stdin is 10Mi; the limit is 32Ki") {
			t.Errorf("corpus %s with 10 MiB on stdin = %q, %v; want it refused as 10Mi over the 32Ki limit", strings.Join(args, " "), out, err)
		}
	}
	if out := c.want("config list hello"); strings.Contains(out, "BIG") {
		t.Errorf("after a refused value, config list says:\n%s", out)
	}
	c.wantErr("service show pay", "not found")

	// One newline after a value of the limit is the shell's, not the value's.
	if _, err := c.run(strings.Repeat("y", corpusv1.MaxConfigValueBytes)+"\n", "config", "set", "hello", "OK=-", "--no-restart"); err != nil {
		t.Errorf("config set of a value of the limit and a newline = %v", err)
	}
	if out := c.want("config get hello OK"); len(strings.TrimSuffix(out, "\n")) != corpusv1.MaxConfigValueBytes {
		t.Errorf("config get hello OK = %d bytes, want %d", len(out), corpusv1.MaxConfigValueBytes)
	}

	stream, err := c.ops.Projects.SetConfig(context.Background(), connect.NewRequest(&corpusv1.SetConfigRequest{
		Project: "hello", Set: map[string]string{"API": string(bytes.Repeat([]byte("z"), 40000))}, NoRestart: true}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	if err == nil || !strings.Contains(err.Error(), "the value of API is 39.1Ki; the limit is 32Ki") {
		t.Errorf("SetConfig of 40000 bytes = %v, want the size and the limit in human units", err)
	}
}
