package nodes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	corpusv1 "corpus/proto/corpus/v1"
)

// The image procedures ask the nodes' agents: each keeps its own image
// cache, which the cluster's state does not hold.

func (s *nodeService) ListImages(ctx context.Context, req *connect.Request[corpusv1.ListImagesRequest]) (*connect.Response[corpusv1.ListImagesResponse], error) {
	answers, unreachable, err := askNodes(s, req.Msg.Node, "listing its images", func(n *corpusv1.Node) (*corpusv1.ListImagesResponse, error) {
		r, err := s.b.AgentClient(n).ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{}))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	})
	if err != nil {
		return nil, err
	}
	res := &corpusv1.ListImagesResponse{Unreachable: unreachable}
	for _, a := range answers {
		res.Images = append(res.Images, a.Images...)
		res.Usage = append(res.Usage, a.Usage...)
	}
	return connect.NewResponse(res), nil
}

func (s *nodeService) RemoveImage(ctx context.Context, req *connect.Request[corpusv1.RemoveImageRequest]) (*connect.Response[corpusv1.RemoveImageResponse], error) {
	if req.Msg.Node == "" || strings.TrimSpace(req.Msg.Image) == "" {
		return nil, api.ToConnect(api.Invalidf("name the node and the image: corpus image rm NODE IMAGE (see corpus image list)"))
	}
	nodes, err := s.imageNodes(req.Msg.Node)
	if err != nil {
		return nil, err
	}
	r, err := s.b.AgentClient(nodes[0]).RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Image: req.Msg.Image}))
	if err != nil {
		return nil, agentError(nodes[0], "removing image "+req.Msg.Image, err)
	}
	return connect.NewResponse(r.Msg), nil
}

func (s *nodeService) PruneImages(ctx context.Context, req *connect.Request[corpusv1.PruneImagesRequest]) (*connect.Response[corpusv1.PruneImagesResponse], error) {
	answers, unreachable, err := askNodes(s, req.Msg.Node, "pruning its images", func(n *corpusv1.Node) (*corpusv1.PruneImagesResponse, error) {
		r, err := s.b.AgentClient(n).PruneImages(ctx, connect.NewRequest(&corpusv1.PruneImagesRequest{}))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	})
	if err != nil {
		return nil, err
	}
	res := &corpusv1.PruneImagesResponse{Unreachable: unreachable}
	for _, a := range answers {
		res.Removed = append(res.Removed, a.Removed...)
		res.FreedBytes += a.FreedBytes
	}
	return connect.NewResponse(res), nil
}

// imageNodes is the named node, or every node with an agent address
// when name is empty, sorted by name.
func (s *nodeService) imageNodes(name string) ([]*corpusv1.Node, error) {
	view := s.b.Store.Read()
	if name != "" {
		n := api.FindNode(view, name)
		if n == nil {
			return nil, api.ToConnect(api.NotFound("node", name, "corpus node list"))
		}
		if n.AgentAddress == "" {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %s has no agent address yet; retry once its agent reported", n.Name))
		}
		return []*corpusv1.Node{n}, nil
	}
	var out []*corpusv1.Node
	for _, n := range view.Nodes() {
		if n.AgentAddress != "" {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *corpusv1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// askNodes calls call for the named node, or for every node at once
// when name is empty, and returns the answers in the nodes' order. The
// named node's failure is the error (agentError, saying what it was
// asked); of every node's, the failures are listed by node name.
func askNodes[T any](s *nodeService, name, what string, call func(*corpusv1.Node) (T, error)) ([]T, map[string]string, error) {
	nodes, err := s.imageNodes(name)
	if err != nil {
		return nil, nil, err
	}
	res := make([]T, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { res[i], errs[i] = call(n) })
	}
	wg.Wait()
	var out []T
	unreachable := map[string]string{}
	for i, err := range errs {
		switch {
		case err != nil && name != "":
			return nil, nil, agentError(nodes[i], what, err)
		case err != nil:
			unreachable[nodes[i].Name] = agentError(nodes[i], what, err).Message()
		default:
			out = append(out, res[i])
		}
	}
	return out, unreachable, nil
}

// agentError is an agent's refusal with its code kept (an image in use
// stays FailedPrecondition, a missing one NotFound, a failure on the
// node Internal) or, when the agent could not be reached, Unavailable.
func agentError(n *corpusv1.Node, what string, err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeInvalidArgument:
			return connect.NewError(ce.Code(), errors.New(ce.Message()))
		case connect.CodeInternal:
			return connect.NewError(ce.Code(), fmt.Errorf("node %s: %s: %s", n.Name, what, ce.Message()))
		case connect.CodeUnimplemented:
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s: %s: its agent has no image cache API; upgrade it", n.Name, what))
		}
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %s: %s: %w", n.Name, what, err))
}
