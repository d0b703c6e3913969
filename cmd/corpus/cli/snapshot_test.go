package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotRestoreCommand: snapshot restore asks first (--yes for
// scripts), refuses a damaged file, puts the saved state back into the
// running coordinator and says where (--json too).
func TestSnapshotRestoreCommand(t *testing.T) {
	c := startCoordinator(t)
	dir := t.TempDir()
	key, snap := filepath.Join(dir, "key"), filepath.Join(dir, "cluster.snap")
	os.WriteFile(key, []byte("a passphrase of some length\n"), 0o600)
	c.want("project create hello --detach")
	c.want("operator snapshot save "+snap+" --key-file "+key, "saved to "+snap)
	c.want("project create later --detach")

	if out, err := c.run("y\n", "operator", "snapshot", "restore", snap, "--key-file", key); !errors.Is(err, errNotConfirmed) {
		t.Errorf("restore with stdin not a terminal = %q, %v; want it refused, asking for --yes", out, err)
	}
	raw, _ := os.ReadFile(snap)
	raw[len(raw)-1] ^= 0xff
	damaged := filepath.Join(dir, "damaged.snap")
	os.WriteFile(damaged, raw, 0o600)
	c.wantErr("operator snapshot restore "+damaged+" --key-file "+key+" --yes", "damaged")
	c.want("project show later", "Env dev:")

	c.want("operator snapshot restore "+snap+" --key-file "+key+" --yes", "restored index ", " term ", " objects (snapshot of cluster ")
	c.wantErr("project show later", "not found")
	c.want("project show hello", "Env dev:")

	out := c.want("--json operator snapshot restore " + snap + " --key-file " + key + " --yes")
	var res struct {
		RaftIndex string            `json:"raft_index"`
		Objects   string            `json:"objects"`
		Counts    map[string]string `json:"counts"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.RaftIndex == "" || res.Counts["projects"] != "1" || res.Objects == "" {
		t.Errorf("--json restore = %q (%v), want the index and counts", out, err)
	}
	if strings.Contains(out, "passphrase") {
		t.Error("the output holds the secret")
	}
}
