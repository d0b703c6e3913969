package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestImagesOfNodes: the image procedures ask the named node's agent;
// an agent without the image API is a clear refusal to upgrade it, one
// that cannot be reached is Unavailable, and asking every node lists
// each that did not answer instead of failing.
func TestImagesOfNodes(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	old := s.enroll("n1")
	old.address = serveFakeAgent(t, s, old) // answers Exec only
	old.report(t)
	s.enroll("n2").report(t) // its agent address answers nothing
	nodes := s.ops().nodes

	_, err := nodes.ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{Node: "n1"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("ListImages(n1, an older agent) = %v, want FailedPrecondition asking to upgrade it", err)
	}
	_, err = nodes.RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Node: "n2", Image: "busybox"}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "node n2") {
		t.Errorf("RemoveImage(n2, unreachable) = %v, want Unavailable naming n2", err)
	}
	_, err = nodes.RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Node: "n1"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("RemoveImage(n1, no image) = %v, want InvalidArgument", err)
	}
	for _, call := range []func() (map[string]string, error){
		func() (map[string]string, error) {
			r, err := nodes.ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{}))
			if err != nil {
				return nil, err
			}
			return r.Msg.Unreachable, nil
		},
		func() (map[string]string, error) {
			r, err := nodes.PruneImages(ctx, connect.NewRequest(&corpusv1.PruneImagesRequest{}))
			if err != nil {
				return nil, err
			}
			return r.Msg.Unreachable, nil
		},
	} {
		unreachable, err := call()
		if err != nil || len(unreachable) != 2 || !strings.Contains(unreachable["n1"], "upgrade") || unreachable["n2"] == "" {
			t.Errorf("every node's images = unreachable %v, %v; want n1 (upgrade) and n2 listed", unreachable, err)
		}
	}
}
