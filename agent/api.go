package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"corpus/agent/certs"
	"corpus/agent/deploy"
	"corpus/agent/imagecache"
	"corpus/agent/load"
	"corpus/agent/logs"
	"corpus/agent/services"
	"corpus/agent/shell"
	"corpus/agent/volumes"
	"corpus/internal/secret"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// agentAPI is the agent's own API: each subsystem serves its procedures,
// and callerCheck admits only the cluster's coordinators to any of them.
type agentAPI struct {
	shell.Sessions    // Exec, Shell
	logs.Reader       // Logs
	deploy.Releases   // Redeploy, ReleaseSource, Rollback, Processes
	services.Node     // DumpService, StoreBackup, ReadBackup, LoadService, RemoveBackup
	volumes.Transfers // MeasureVolume, ExportVolume, ImportVolume, SnapshotVolume
	load.Sampler      // Load
	certs.Challenges  // CheckChallenge
	imagecache.Images // ListImages, RemoveImage, PruneImages
}

var _ corpusv1connect.NodeAgentServiceHandler = agentAPI{}

// mountAPI serves the agent's own API, called by coordinators only.
func mountAPI(mux *http.ServeMux, a *Agent) {
	h := host{a}
	s := agentAPI{
		Sessions:  a.sessions,
		Reader:    logs.Reader{Store: a.logs, Guests: h, Node: a.id.NodeName},
		Releases:  deploy.Releases{Pipeline: a.deploys, Run: a.runCtx},
		Node:      a.services,
		Transfers: volumes.Transfers{M: a.vols},
		Sampler:   load.Sampler{Guests: h.loadSamples},
		Images:    imagecache.Images{Name: a.id.NodeName, Drivers: a.drivers},
	}
	s.Challenges.Node = a.id.NodeName
	if a.net != nil && a.net.Proxy() != nil {
		s.Sampler.Proxy, s.Challenges.Proxy = a.net.Proxy(), a.net.Proxy()
	}
	mux.Handle(corpusv1connect.NewNodeAgentServiceHandler(s,
		connect.WithReadMaxBytes(2<<20), connect.WithInterceptors(callerCheck{a})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "{\"status\":\"ok\",\"node\":%q}\n", a.id.NodeName)
	})
}

// callerCheck admits coordinators of this cluster (the cluster's agent
// key) to every procedure of the agent's API, before the procedure
// reads anything.
type callerCheck struct{ a *Agent }

func (c callerCheck) check(h http.Header) error {
	tok, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if c.a.id.AgentKey == "" || !secret.Equal(tok, secret.Hash(c.a.id.AgentKey)) {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("only coordinators of this cluster may call the agent"))
	}
	return nil
}

func (c callerCheck) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := c.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (callerCheck) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c callerCheck) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := c.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
