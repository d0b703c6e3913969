// Package cache is the agent's local database (bbolt): its node identity,
// the last desired state it received, and a journal of work in flight.
//
// It is a cache, never the only truth: the desired state comes from the
// coordinator and observed state from the drivers. It lets an agent that
// restarts while cut off from the coordinator keep its guests as they were,
// and lets it clean up work a crash interrupted.
package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	corpusv1 "corpus/proto/corpus/v1"
)

var (
	bucketMeta    = []byte("meta")
	bucketDesired = []byte("desired")
	bucketJournal = []byte("journal")
	bucketDeploys = []byte("deploys")
	keyIdentity   = []byte("identity")
	keyDesired    = []byte("watch")
	keyOrphans    = []byte("orphans")
	keySchema     = []byte("schema")
)

// Schema is the layout version of the database this agent writes. Open
// migrates an older database to it, one step at a time, and refuses a
// newer one (an agent downgraded past a layout change).
const Schema = 1

// migrations[n] turns a database of schema n into one of schema n+1,
// inside Open's transaction.
var migrations = [Schema]func(*bolt.Tx) error{
	// 0 → 1: the layout is that of the agents before schema versions;
	// only the schema key is new.
	func(*bolt.Tx) error { return nil },
}

// ErrNewerSchema means the database was written by a newer agent.
var ErrNewerSchema = errors.New("the agent cache was written by a newer corpus agent")

// ErrNoIdentity means the agent has not enrolled yet.
var ErrNoIdentity = errors.New("this agent has not enrolled yet")

// Identity is what enrollment gave this agent.
type Identity struct {
	NodeID      string    `json:"node_id"`
	NodeName    string    `json:"node_name"`
	ClusterID   string    `json:"cluster_id"`
	AgentKey    string    `json:"agent_key"`
	Coordinator string    `json:"coordinator"`
	EnrolledAt  time.Time `json:"enrolled_at"`
	// KeyPEM and CertPEM are the node's key and certificate, CAPEM the
	// cluster CAs (several during a rotation of the cluster CA); the agent
	// authenticates with them and trusts only those.
	KeyPEM  []byte `json:"key_pem"`
	CertPEM []byte `json:"cert_pem"`
	CAPEM   []byte `json:"ca_pem"`
	// JoinTokenID is the id of the join token last traded for a
	// certificate (enrollment, rejoin): the same token given again is
	// not traded again.
	JoinTokenID string `json:"join_token_id,omitempty"`
}

// Entry is one operation in flight, written before it starts and removed
// when it ends.
type Entry struct {
	GuestID   string    `json:"guest_id"`
	GuestName string    `json:"guest_name"`
	Driver    string    `json:"driver"`
	Op        string    `json:"op"`
	Started   time.Time `json:"started"`
}

// Cache is the open database. It is safe for concurrent use.
type Cache struct {
	db *bolt.DB
}

// Open opens (creating) the database at path. Only one process can hold it:
// a second agent on the same state folder fails here after timeout.
func Open(path string) (*Cache, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("opening %s: another agent is using this state folder", path)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketDesired, bucketJournal, bucketDeploys} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return migrate(tx)
	})
	if err != nil {
		db.Close()
		if errors.Is(err, ErrNewerSchema) {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		return nil, fmt.Errorf("initialising %s: %w", path, err)
	}
	return &Cache{db: db}, nil
}

// migrate brings the database in tx to Schema, or refuses a newer one.
func migrate(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	have := 0
	if raw := meta.Get(keySchema); raw != nil {
		n, err := strconv.Atoi(string(raw))
		if err != nil {
			return fmt.Errorf("reading the cache's schema %q: %w", raw, err)
		}
		have = n
	}
	if have > Schema {
		return fmt.Errorf("%w (schema %d; this agent reads up to %d): run that release or later", ErrNewerSchema, have, Schema)
	}
	for ; have < Schema; have++ {
		if err := migrations[have](tx); err != nil {
			return fmt.Errorf("migrating the cache from schema %d: %w", have, err)
		}
	}
	return meta.Put(keySchema, []byte(strconv.Itoa(Schema)))
}

// Close closes the database.
func (c *Cache) Close() error { return c.db.Close() }

// Identity returns the stored identity or ErrNoIdentity.
func (c *Cache) Identity() (Identity, error) {
	var id Identity
	err := c.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketMeta).Get(keyIdentity)
		if raw == nil {
			return ErrNoIdentity
		}
		return json.Unmarshal(raw, &id)
	})
	return id, err
}

// SetIdentity stores the identity.
func (c *Cache) SetIdentity(id Identity) error {
	raw, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return c.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyIdentity, raw)
	})
}

// SetDesired stores the last desired state received from the
// coordinator: this node, its guests and its routes.
func (c *Cache) SetDesired(msg *corpusv1.WatchResponse) error {
	raw, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	return c.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDesired).Put(keyDesired, raw)
	})
}

// SetOrphans stores the guests kept on this node that the cluster does
// not know (guest id to name; see agent/orphans.go).
func (c *Cache) SetOrphans(orphans map[string]string) error {
	raw, err := json.Marshal(orphans)
	if err != nil {
		return err
	}
	return c.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyOrphans, raw)
	})
}

// Orphans returns the guests SetOrphans stored last (empty if none).
func (c *Cache) Orphans() (map[string]string, error) {
	out := map[string]string{}
	err := c.db.View(func(tx *bolt.Tx) error {
		if raw := tx.Bucket(bucketMeta).Get(keyOrphans); raw != nil {
			return json.Unmarshal(raw, &out)
		}
		return nil
	})
	return out, err
}

// Desired returns the stored desired state; ok is false when none was
// ever stored.
func (c *Cache) Desired() (msg *corpusv1.WatchResponse, ok bool, err error) {
	err = c.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketDesired).Get(keyDesired)
		if raw == nil {
			return nil
		}
		ok = true
		msg = &corpusv1.WatchResponse{}
		return proto.Unmarshal(raw, msg)
	})
	return msg, ok, err
}

// Begin journals an operation before it starts.
func (c *Cache) Begin(e Entry) error {
	raw, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return c.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).Put([]byte(e.GuestID+"/"+e.Op), raw)
	})
}

// End removes a finished operation from the journal.
func (c *Cache) End(e Entry) error {
	return c.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).Delete([]byte(e.GuestID + "/" + e.Op))
	})
}

// Journal returns the operations that were in flight.
func (c *Cache) Journal() ([]Entry, error) {
	var out []Entry
	err := c.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).ForEach(func(_, v []byte) error {
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
	})
	return out, err
}

// Deploy is a release pipeline (or a rollback) in flight on one project
// environment, rewritten as it passes each step and removed when it is
// resolved.
type Deploy struct {
	Kind      string    `json:"kind"` // "deploy", "rollback" or "instance"
	Project   string    `json:"project"`
	Env       string    `json:"env"`
	Guest     string    `json:"guest"`
	ReleaseID string    `json:"release_id,omitempty"`
	Number    uint32    `json:"number"`   // the release being deployed or rolled back to
	Previous  uint32    `json:"previous"` // the release serving before, 0 for none
	Step      string    `json:"step"`
	Started   time.Time `json:"started"`
	// OldWebPort is the port the routes pointed at before the deploy
	// moved them to its new web process (0: not moved).
	OldWebPort int32 `json:"old_web_port,omitempty"`
	// Instance is the environment's instance an "instance" deploy is of.
	Instance uint32 `json:"instance,omitempty"`
}

// Key identifies a deploy's environment (and instance past the first)
// in the journal.
func (d Deploy) Key() string {
	if d.Instance > 1 {
		return fmt.Sprintf("%s/%s#%d", d.Project, d.Env, d.Instance)
	}
	return d.Project + "/" + d.Env
}

// SetDeploy writes (or rewrites) a deploy's journal entry.
func (c *Cache) SetDeploy(d Deploy) error {
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return c.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDeploys).Put([]byte(d.Key()), raw)
	})
}

// EndDeploy removes a resolved deploy from the journal.
func (c *Cache) EndDeploy(d Deploy) error {
	return c.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDeploys).Delete([]byte(d.Key()))
	})
}

// Deploys returns the deploys that were in flight.
func (c *Cache) Deploys() ([]Deploy, error) {
	var out []Deploy
	err := c.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDeploys).ForEach(func(_, v []byte) error {
			var d Deploy
			if err := json.Unmarshal(v, &d); err != nil {
				return err
			}
			out = append(out, d)
			return nil
		})
	})
	return out, err
}
