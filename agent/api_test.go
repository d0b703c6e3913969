package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"corpus/agent/cache"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// TestStreamingCallers: the caller check covers the streaming
// procedures too (one interceptor on the whole service): without the
// cluster's agent key a stream is refused before its request is read;
// with it, the subsystem answers (a bad guest name here).
func TestStreamingCallers(t *testing.T) {
	t.Parallel()
	client := serveAPI(t, &Agent{id: cache.Identity{NodeName: "n1", AgentKey: "agent-key"}})
	auth := func(h http.Header, token string) {
		if token != "" {
			h.Set("Authorization", "Bearer "+token)
		}
	}
	logs := func(token string) error {
		req := connect.NewRequest(&corpusv1.GuestLogsRequest{Name: "../web"})
		auth(req.Header(), token)
		s, err := client.Logs(context.Background(), req)
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	exec := func(token string) error {
		req := connect.NewRequest(&corpusv1.ExecGuestRequest{Name: "../web", Argv: []string{"true"}})
		auth(req.Header(), token)
		s, err := client.Exec(context.Background(), req)
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	for _, tc := range []struct {
		what, token string
		call        func(string) error
		want        connect.Code
	}{
		{"Logs, no credential", "", logs, connect.CodeUnauthenticated},
		{"Logs, another key", "other-key", logs, connect.CodeUnauthenticated},
		{"Logs, the agent key", "agent-key", logs, connect.CodeInvalidArgument},
		{"Exec, no credential", "", exec, connect.CodeUnauthenticated},
		{"Exec, the agent key", "agent-key", exec, connect.CodeInvalidArgument},
	} {
		if err := tc.call(tc.token); connect.CodeOf(err) != tc.want {
			t.Errorf("%s = %v, want %v", tc.what, err, tc.want)
		}
	}
}

// serveAPI serves a's API, as mounted, over HTTP until the test ends and
// returns a client of it.
func serveAPI(t *testing.T, a *Agent) corpusv1connect.NodeAgentServiceClient {
	mux := http.NewServeMux()
	mountAPI(mux, a)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return corpusv1connect.NewNodeAgentServiceClient(srv.Client(), srv.URL)
}
