package kubernetes

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"corpus/drivers"
)

// TestPodCommand: a guest's command and args become its container's, as
// Kubernetes reads them; a spec without them hashes as it did before
// they existed (no rollout of every workload when the agent upgrades);
// a project's supervisor replaces both.
func TestPodCommand(t *testing.T) {
	s := spec("ffff000000000003", "cmd")
	if b, _ := json.Marshal(s); bytes.Contains(b, []byte("Command")) || bytes.Contains(b, []byte("Args")) {
		t.Errorf("a spec without a command marshals them: %s", b)
	}
	c := desiredPodTemplate(s, "").Spec.Containers[0]
	if c.Command != nil || c.Args != nil {
		t.Errorf("without a command: container command %q args %q, want the image's", c.Command, c.Args)
	}
	s.Command, s.Args = []string{"/bin/sh", "-c"}, []string{"exec app --port 80"}
	c = desiredPodTemplate(s, "").Spec.Containers[0]
	if !slices.Equal(c.Command, s.Command) || !slices.Equal(c.Args, s.Args) {
		t.Errorf("container command %q args %q, want %q %q", c.Command, c.Args, s.Command, s.Args)
	}
	if specHash(s) == specHash(spec("ffff000000000003", "cmd")) {
		t.Error("the command does not change the spec's hash")
	}
	s.Boot = &drivers.Boot{Command: []string{"/corpus/supervisor"}}
	c = desiredPodTemplate(s, "").Spec.Containers[0]
	if !slices.Equal(c.Command, s.Boot.Command) || c.Args != nil {
		t.Errorf("with the supervisor: container command %q args %q", c.Command, c.Args)
	}
}
