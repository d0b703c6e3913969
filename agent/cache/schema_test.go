package cache

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// writeRaw makes a database at path as another agent left it: the meta
// bucket with schema (none when empty) and an identity.
func writeRaw(t *testing.T, path, schema string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if schema != "" {
			if err := meta.Put(keySchema, []byte(schema)); err != nil {
				return err
			}
		}
		return meta.Put(keyIdentity, []byte(`{"node_id":"n1","node_name":"node"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func schemaOf(t *testing.T, path string) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out string
	db.View(func(tx *bolt.Tx) error {
		out = string(tx.Bucket(bucketMeta).Get(keySchema))
		return nil
	})
	return out
}

// TestSchema: a database of an agent before schema versions is migrated
// and keeps its identity; one of a newer agent is refused with what to
// do, and left as it was.
func TestSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	old := filepath.Join(dir, "old.db")
	writeRaw(t, old, "")
	c, err := Open(old)
	if err != nil {
		t.Fatalf("Open(cache without schema) = %v", err)
	}
	id, err := c.Identity()
	c.Close()
	if err != nil || id.NodeID != "n1" {
		t.Errorf("Identity() after the migration = %+v, %v; want node n1", id, err)
	}
	if got := schemaOf(t, old); got != "1" {
		t.Errorf("schema after Open = %q, want 1", got)
	}

	newer := filepath.Join(dir, "newer.db")
	writeRaw(t, newer, "2")
	c, err = Open(newer)
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), "schema 2; this agent reads up to 1") || !strings.Contains(err.Error(), "run that release or later") {
		t.Errorf("Open(cache of schema 2) = %v, want ErrNewerSchema saying what to run", err)
	}
	if got := schemaOf(t, newer); got != "2" {
		t.Errorf("schema after a refused Open = %q, want 2 (unchanged)", got)
	}
}
