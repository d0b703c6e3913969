package projects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"corpus/coordinator/api"

	corpusv1 "corpus/proto/corpus/v1"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"corpus/coordinator/admission"
	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/coordinator/extensions"
)

// LintPush runs the lint extensions on a push to an environment whose
// guest is on the calling agent's node, in order; the first refusal
// ends it.
func (s *Agent) LintPush(ctx context.Context, req *connect.Request[corpusv1.LintPushRequest]) (*connect.Response[corpusv1.LintPushResponse], error) {
	m := req.Msg
	if err := validRelease(m.Project, m.Env); err != nil {
		return nil, api.ToConnect(err)
	}
	view := s.b.Store.Read()
	p := view.Project(m.Project)
	e := corpusv1.EnvNamed(p, m.Env)
	if e == nil {
		return nil, api.ToConnect(api.NotFound("environment", m.Project+"/"+m.Env, "corpus project list"))
	}
	if !slices.Contains(view.EnvNodes(e), auth.FromContext(ctx).NodeID) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s/%s has no guest on this node", m.Project, m.Env))
	}
	linters := extensions.For(view.Extensions(), corpusv1.ExtensionLint, corpusv1.OnDeploy)
	res := &corpusv1.LintPushResponse{}
	if len(linters) == 0 {
		return connect.NewResponse(res), nil
	}
	if s.b.Extensions == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("extensions are configured but this coordinator cannot call them"))
	}
	obj, err := protojson.Marshal(m)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	// A refusal is audited as a refused push, as the pusher.
	refused := func(x *corpusv1.Extension, why error) (*connect.Response[corpusv1.LintPushResponse], error) {
		res.Refused = x.Name
		res.Lines = append(res.Lines, audit.ErrorText(why))
		s.b.Audit().Refusal(ctx, "user:"+m.Author, "refused git push", m.Project+"/"+m.Env, audit.ErrorText(why)+" (over ssh, node "+auth.FromContext(ctx).NodeName+")")
		return connect.NewResponse(res), nil
	}
	for _, x := range linters {
		ans, err := s.b.Admission().Call(ctx, view, x, extensions.Request{Kind: corpusv1.OnDeploy, User: "user:" + m.Author, Object: obj})
		if err != nil {
			if ferr := s.b.Admission().Failed(ctx, x, "push", err); ferr != nil {
				return refused(x, ferr)
			}
			res.Lines = append(res.Lines, fmt.Sprintf("extension %s failed (its failure policy is ignore): %v", x.Name, err))
			continue
		}
		for _, l := range ans.Lines {
			res.Lines = append(res.Lines, x.Name+": "+strings.TrimRight(l, "\r\n"))
		}
		if !*ans.Allowed {
			return refused(x, admission.RefusedBy(x, "push", ans.Message))
		}
	}
	return connect.NewResponse(res), nil
}
