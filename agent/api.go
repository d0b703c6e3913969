package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"corpus/drivers"
	"corpus/internal/names"
	"corpus/internal/rpc"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// mountAPI serves the agent's own API, called by coordinators only.
func mountAPI(mux *http.ServeMux, a *Agent) {
	mux.Handle(corpusv1connect.NewNodeAgentServiceHandler(&agentAPI{a},
		connect.WithReadMaxBytes(2<<20)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "{\"status\":\"ok\",\"node\":%q}\n", a.id.NodeName)
	})
}

type agentAPI struct{ a *Agent }

// checkCaller admits coordinators of this cluster (the cluster's agent key).
func (a *Agent) checkCaller(h http.Header) error {
	tok, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if a.id.AgentKey == "" || !secret.Equal(tok, secret.Hash(a.id.AgentKey)) {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("only coordinators of this cluster may call the agent"))
	}
	return nil
}

func (s *agentAPI) Exec(ctx context.Context, req *connect.Request[corpusv1.ExecGuestRequest], stream *connect.ServerStream[corpusv1.ExecOutput]) error {
	a := s.a
	if err := a.checkCaller(req.Header()); err != nil {
		return err
	}
	m := req.Msg
	if err := names.Validate("guest", m.Name); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	if len(m.Argv) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no command given"))
	}
	g := a.desiredByName(m.Name)
	if g == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("guest %q is not on node %s", m.Name, a.id.NodeName))
	}
	d, ok := a.drivers[g.Spec.GetDriver()]
	if !ok {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("driver %s is not available on node %s", g.Spec.GetDriver(), a.id.NodeName))
	}
	if !d.Capabilities().Exec {
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("driver %s cannot exec", g.Spec.GetDriver()))
	}
	var mu sync.Mutex
	send := func(out *corpusv1.ExecOutput) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(out)
	}
	code, err := d.Exec(ctx, g.Name, drivers.ExecRequest{
		Argv:   m.Argv,
		Env:    m.Env,
		Dir:    m.Dir,
		Stdin:  bytes.NewReader(m.Stdin),
		Stdout: rpc.StreamWriter(func(p []byte) error { return send(&corpusv1.ExecOutput{Stdout: p}) }),
		Stderr: rpc.StreamWriter(func(p []byte) error { return send(&corpusv1.ExecOutput{Stderr: p}) }),
	})
	switch {
	case errors.Is(err, drivers.ErrNotRunning):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, drivers.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case err != nil:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("exec in %s: %w", g.Name, err))
	}
	return send(&corpusv1.ExecOutput{Exited: true, ExitCode: int32(code)})
}
