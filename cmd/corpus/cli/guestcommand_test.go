package cli

import (
	"strings"
	"testing"
)

// TestGuestCreateCommand: words after -- replace an OCI image's cmd and
// --entrypoint its entrypoint; the guest shows them as a shell would
// take them back; stray arguments and an empty entrypoint are refused.
func TestGuestCreateCommand(t *testing.T) {
	t.Parallel()
	c := startCoordinator(t)
	const ref = "registry.example:5000/team/app:1"
	if _, err := c.run("", "guest", "create", "sh", "--image", ref, "--detach", "--entrypoint", "/bin/sh", "--", "-c", "exec app serve"); err != nil {
		t.Fatalf("guest create with --entrypoint and args = %v", err)
	}
	c.want("guest show sh", "/bin/sh -c 'exec app serve'")
	if _, err := c.run("", "guest", "create", "job", "--image", ref, "--detach", "--", "migrate", "--all"); err != nil {
		t.Fatalf("guest create with args = %v", err)
	}
	out := c.want("guest show job", "migrate --all")
	if !strings.Contains(out, "Args:") {
		t.Errorf("guest show job printed:\n%s\nwant the words as Args (the image's entrypoint stays)", out)
	}
	c.wantErr("guest create odd --image "+ref+" extra", "unexpected argument \"extra\"")
	if _, err := c.run("", "guest", "create", "empty", "--image", ref, "--entrypoint", ""); err == nil || !strings.Contains(err.Error(), "--entrypoint") {
		t.Errorf("guest create with --entrypoint \"\" = %v, want a refusal naming --entrypoint", err)
	}
	c.wantErr("guest create nul --image "+ref+" --detach -- a\x00b", "NUL")
}
