package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// agentRefusing is the agent API as served by an agent that refuses
// every exec and image list (a bad request).
type agentRefusing struct {
	corpusv1connect.UnimplementedNodeAgentServiceHandler
}

func (agentRefusing) Exec(context.Context, *connect.Request[corpusv1.ExecGuestRequest], *connect.ServerStream[corpusv1.ExecOutput]) error {
	return connect.NewError(connect.CodeNotFound, errors.New(`guest "web" is not on node n2`))
}

// TestAgentErrors: a call to an agent that nothing answers (a closed
// port: connection refused) fails Unavailable with the node, its agent's
// address and what to check, unary or streaming, and the relay passes
// that on as it is; an agent that answers keeps its code and words, with
// the node named.
func TestAgentErrors(t *testing.T) {
	t.Parallel()
	const closed = "127.0.0.1:1" // nothing listens on port 1
	mux := http.NewServeMux()
	mux.Handle(corpusv1connect.NewNodeAgentServiceHandler(agentRefusing{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	client := func(n *corpusv1.Node) corpusv1connect.NodeAgentServiceClient {
		return corpusv1connect.NewNodeAgentServiceClient(rpc.HTTPClient(nil), "http://"+n.AgentAddress, connect.WithInterceptors(AgentErrors(n)))
	}
	exec := func(n *corpusv1.Node) error {
		up, err := client(n).Exec(context.Background(), connect.NewRequest(&corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"true"}}))
		return RelayFromAgent(n, "exec", up, err, func(*corpusv1.ExecOutput) error { return nil })
	}
	images := func(n *corpusv1.Node) error {
		_, err := client(n).ListImages(context.Background(), connect.NewRequest(&corpusv1.ListImagesRequest{}))
		return err
	}
	down := &corpusv1.Node{Name: "n2", AgentAddress: closed}
	up := &corpusv1.Node{Name: "n2", AgentAddress: strings.TrimPrefix(srv.URL, "http://")}
	refused := fmt.Sprintf("node n2 (%s) did not answer: connection refused; is its agent running? `corpus node list`", closed)
	for _, tc := range []struct {
		what string
		err  error
		code connect.Code
		msg  string
	}{
		{"exec relayed to a node nothing answers at", exec(down), connect.CodeUnavailable, refused},
		{"image list of a node nothing answers at", images(down), connect.CodeUnavailable, refused},
		{"exec relayed to an agent that refuses it", exec(up), connect.CodeNotFound, `agent of node n2: guest "web" is not on node n2`},
		{"image list of an agent that does not serve it", images(up), connect.CodeUnimplemented, "corpus.v1.NodeAgentService.ListImages is not implemented"},
	} {
		var ce *connect.Error
		if !errors.As(tc.err, &ce) || ce.Code() != tc.code || ce.Message() != tc.msg {
			t.Errorf("%s = %v; want %v: %s", tc.what, tc.err, tc.code, tc.msg)
		}
	}
}
