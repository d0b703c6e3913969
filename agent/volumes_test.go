package agent

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"corpus/agent/cache"
	"corpus/agent/volumes"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestMeasureVolumeCallers: only the cluster's coordinators (holding its
// agent key) may ask a node to measure a volume; a bad name is refused
// before anything is read, and a node whose driver keeps its volumes
// says it cannot measure them.
func TestMeasureVolumeCallers(t *testing.T) {
	t.Parallel()
	a := &Agent{id: cache.Identity{NodeName: "n1", AgentKey: "agent-key"}}
	a.vols = volumes.New(volumes.Config{Node: func() (string, string) { return a.id.NodeID, a.id.NodeName }})
	client := serveAPI(t, a)
	measure := func(token, name string) error {
		req := connect.NewRequest(&corpusv1.MeasureVolumeRequest{Name: name})
		if token != "" {
			req.Header().Set("Authorization", "Bearer "+token)
		}
		_, err := client.MeasureVolume(context.Background(), req)
		return err
	}
	for _, tc := range []struct {
		what, token, name string
		want              connect.Code
	}{
		{"no credential", "", "db", connect.CodeUnauthenticated},
		{"another key", "other-key", "db", connect.CodeUnauthenticated},
		{"the key's hash", secret.Hash("agent-key"), "db", connect.CodeUnauthenticated},
		{"bad name", "agent-key", "../db", connect.CodeInvalidArgument},
		{"no volume backend", "agent-key", "db", connect.CodeUnimplemented},
	} {
		if err := measure(tc.token, tc.name); connect.CodeOf(err) != tc.want {
			t.Errorf("MeasureVolume(%s) = %v, want %v", tc.what, err, tc.want)
		}
	}
}
