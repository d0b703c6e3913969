// Package auditlog serves AuditService: the replicated audit log, read
// with filters.
package auditlog

import (
	"context"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// New returns the handler of AuditService.
func New(b *api.Backend) corpusv1connect.AuditServiceHandler { return &auditService{b} }

type auditService struct{ b *api.Backend }

// noisy are actions agents and the control plane take all the time; they
// are left out unless asked for.
var noisy = map[string]bool{"report_guests": true, "report_volumes": true, "update_node": true}

const (
	defaultAuditLimit = 100
	maxAuditLimit     = state.MaxAudit
)

func (s *auditService) ListAudit(ctx context.Context, req *connect.Request[corpusv1.ListAuditRequest]) (*connect.Response[corpusv1.ListAuditResponse], error) {
	m := req.Msg
	limit := int(m.Limit)
	switch {
	case limit < 0:
		return nil, api.ToConnect(api.Invalidf("limit %d is negative", limit))
	case limit == 0:
		limit = defaultAuditLimit
	case limit > maxAuditLimit:
		limit = maxAuditLimit
	}
	var out []*corpusv1.AuditEntry
	for _, e := range s.b.Store.Read().Audit() {
		if !m.IncludeSystem && (e.Actor == state.ActorSystem || noisy[e.Action]) {
			continue
		}
		if (m.Actor != "" && e.Actor != m.Actor) || (m.Action != "" && e.Action != m.Action) || (m.Target != "" && e.Target != m.Target) {
			continue
		}
		out = append(out, e)
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return connect.NewResponse(&corpusv1.ListAuditResponse{Entries: out}), nil
}
