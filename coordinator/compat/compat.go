// Package compat decides what a group of coordinators running different
// releases may do, as etcd's cluster version does.
//
// Each replica runs a binary that can apply the entries of its own
// release and every release before it: its server version, Current. The
// group's cluster version is the lowest server version of its voters; the
// leader raises it (never lowers it) with a SetClusterVersion entry once
// every voter runs a newer release. Everything new that a replica of an
// older release could not apply the same way waits for the cluster
// version:
//
//   - a new entry kind is proposed only once the cluster version reaches
//     the release that introduced it (the table below names it by its
//     field in Command's oneof);
//   - new state the state machine derives from an entry (an allocation,
//     a computed field) is derived only once the cluster version allows
//     its feature.
//
// Plain new fields an older replica stores as unknown fields (protobuf
// keeps them) need no gate.
//
// Adding a feature: add a Feature constant and a row in features with the
// release that introduces it (raise Current to that release if it is
// past the current one) and the entry kinds it adds; guard derived state
// with Allows in the state machine. Proposals of the listed entry kinds
// are refused with ErrNeedsUpgrade until the cluster version allows them.
//
//	cluster version:  v0.1 ──(every voter runs v0.2)──▶ v0.2 ──▶ ...
//	                  a v0.1 replica may rejoin │ a v0.1 replica refuses to start
package compat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	corpusv1 "corpus/proto/corpus/v1"
)

// Version is a release's major and minor number: what the cluster
// version moves by. Patch releases add no entry kinds.
type Version struct {
	Major, Minor int
}

// Current is the server version of this binary: the newest release whose
// entries it can apply. A tree past its last release names the next one.
var Current = Version{0, 2}

// Parse reads "v0.1", "0.1", "v0.1.2", "v0.1.0+3": the major and minor
// number, whatever follows. The empty string is the zero Version (a
// cluster version not decided yet).
func Parse(s string) (Version, error) {
	if s == "" {
		return Version{}, nil
	}
	t := strings.TrimPrefix(s, "v")
	parts := strings.SplitN(t, ".", 3)
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("version %q is not vMAJOR.MINOR", s)
	}
	minor := parts[1]
	if i := strings.IndexAny(minor, "+-"); i >= 0 && len(parts) == 2 {
		minor = minor[:i]
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || ma < 0 || mi < 0 {
		return Version{}, fmt.Errorf("version %q is not vMAJOR.MINOR", s)
	}
	return Version{ma, mi}, nil
}

// String is "v0.1" ("none" for the zero Version).
func (v Version) String() string {
	if v.IsZero() {
		return "none"
	}
	return fmt.Sprintf("v%d.%d", v.Major, v.Minor)
}

// IsZero reports whether v is unset.
func (v Version) IsZero() bool { return v == Version{} }

// Less reports whether v is older than o.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	return v.Minor < o.Minor
}

// Feature names something a group may do only once every voter can.
type Feature string

const (
	// ClusterVersion is the SetClusterVersion entry itself: every release
	// from the first knows it, so it is never gated.
	ClusterVersion Feature = "cluster-version"
	// GuestIDRanges gives each guest its own user and group id range at
	// placement (derived in the state machine).
	GuestIDRanges Feature = "guest-id-ranges"
	// NodeOrphans keeps, per node, the guests it runs that the cluster
	// does not know (after a restore from a snapshot).
	NodeOrphans Feature = "node-orphans"
	// ImageReleases records releases made from an OCI image: a release
	// with an image digest and no commit, which an older replica refuses.
	ImageReleases Feature = "image-releases"
	// TokenLastUsed records when and from where users' tokens were last
	// used (TouchUserTokens entries).
	TokenLastUsed Feature = "token-last-used"
	// SessionTokens revokes, with a token, the session tokens made with
	// it (the dashboard's; derived in the state machine).
	SessionTokens Feature = "session-tokens"
	// BatchedEntries carries several writes in one Raft entry (group
	// commit); until every voter applies them, one entry a write.
	BatchedEntries Feature = "batched-entries"
	// RegistryLogins keeps registries' credentials (PutRegistryLogin and
	// DeleteRegistryLogin entries).
	RegistryLogins Feature = "registry-logins"
	// ImageDeployAdmission calls extensions on image deploys
	// (Extension.on "image.deploy", which an older replica refuses to
	// store).
	ImageDeployAdmission Feature = "image-deploy-admission"
	// CARotation rotates the cluster CA (StartCaRotation and the entries
	// that move it on).
	CARotation Feature = "ca-rotation"
	// NodeRejoin gives an enrolled node a new certificate for a rejoin
	// token (JoinToken.node_id, RejoinNode entries).
	NodeRejoin Feature = "node-rejoin"
)

type feature struct {
	since Version
	// entries are the Command oneof fields (proto names) it adds.
	entries []string
}

var features = map[Feature]feature{
	ClusterVersion:       {since: Version{}, entries: []string{"set_cluster_version"}},
	GuestIDRanges:        {since: Version{0, 1}},
	NodeOrphans:          {since: Version{0, 2}, entries: []string{"report_orphans"}},
	ImageReleases:        {since: Version{0, 2}},
	TokenLastUsed:        {since: Version{0, 2}, entries: []string{"touch_user_tokens"}},
	SessionTokens:        {since: Version{0, 2}},
	BatchedEntries:       {since: Version{0, 2}, entries: []string{"batch"}},
	RegistryLogins:       {since: Version{0, 2}, entries: []string{"put_registry_login", "delete_registry_login"}},
	ImageDeployAdmission: {since: Version{0, 2}},
	CARotation:           {since: Version{0, 2}, entries: []string{"start_ca_rotation", "advance_ca_rotation", "finish_ca_rotation", "abort_ca_rotation"}},
	NodeRejoin:           {since: Version{0, 2}, entries: []string{"rejoin_node"}},
}

var entryFeatures = func() map[string]Feature {
	m := map[string]Feature{}
	for f, row := range features {
		for _, e := range row.entries {
			if _, dup := m[e]; dup {
				panic("compat: entry kind " + e + " is in two features")
			}
			m[e] = f
		}
	}
	return m
}()

// Since is the release that introduced f. An unknown feature panics:
// it is a programming error.
func Since(f Feature) Version {
	row, ok := features[f]
	if !ok {
		panic("compat: unknown feature " + string(f))
	}
	return row.since
}

// Allows reports whether a group at cluster version cluster may use f.
func Allows(cluster Version, f Feature) bool {
	return !cluster.Less(Since(f))
}

// ErrNeedsUpgrade is what Check returns: a coordinator of the group runs
// a release older than the feature.
var ErrNeedsUpgrade = errors.New("needs a newer cluster version")

// Check is nil when a group at cluster version cluster may use f, and
// otherwise an error wrapping ErrNeedsUpgrade that says what to do.
func Check(cluster Version, f Feature) error {
	if Allows(cluster, f) {
		return nil
	}
	return &needsError{feature: f, since: Since(f), cluster: cluster}
}

type needsError struct {
	feature Feature
	since   Version
	cluster Version
}

func (e *needsError) Error() string {
	return fmt.Sprintf("%s needs every coordinator at %s (the group runs %s); upgrade the rest first", e.feature, e.since, e.cluster)
}

func (e *needsError) Unwrap() error { return ErrNeedsUpgrade }

// EntryFeature is the feature that added the Command oneof field kind,
// if a feature did (entry kinds of the first release have none).
func EntryFeature(kind string) (Feature, bool) {
	f, ok := entryFeatures[kind]
	return f, ok
}

// TooOld is the message of a replica whose binary (server version
// Current) is older than its group's cluster version: it must not run.
func TooOld(cluster Version) string {
	return fmt.Sprintf("this group's cluster version is %s; this binary is %s: a downgrade after the group moved on is not possible; run %s or later", cluster, Current, cluster)
}

var cmdOneof = (&corpusv1.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd")

// Kind is the name of cmd's entry kind, its field in Command's oneof
// ("create_guest"); "" when it has none this binary knows.
func Kind(cmd *corpusv1.Command) string {
	fd := cmd.ProtoReflect().WhichOneof(cmdOneof)
	if fd == nil {
		return ""
	}
	return string(fd.Name())
}

// Gate is nil when a group at cluster version cluster may propose cmd,
// and otherwise an error wrapping ErrNeedsUpgrade. An ignorable command
// always may: a replica that does not know it skips it.
func Gate(cluster Version, cmd *corpusv1.Command) error {
	f, ok := EntryFeature(Kind(cmd))
	if !ok || cmd.Ignorable {
		return nil
	}
	return Check(cluster, f)
}

// CheckLog refuses to start a replica whose Raft log raises the cluster
// version past this binary: it would stop at that entry anyway, after
// rejoining its group. Entries that do not decode are left to Apply.
func CheckLog(logs raft.LogStore) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("reading the raft log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("reading the raft log: %w", err)
	}
	var l raft.Log
	for i := max(first, 1); first > 0 && i <= last; i++ {
		if err := logs.GetLog(i, &l); err != nil || l.Type != raft.LogCommand {
			continue
		}
		var cmd corpusv1.Command
		if proto.Unmarshal(l.Data, &cmd) != nil {
			continue
		}
		// A batch entry carries its commands inside.
		for _, c := range append([]*corpusv1.Command{&cmd}, cmd.GetBatch().GetCommands()...) {
			if c.GetSetClusterVersion() == nil {
				continue
			}
			if v, err := Parse(c.GetSetClusterVersion().Version); err == nil && Current.Less(v) {
				return errors.New(TooOld(v))
			}
		}
	}
	return nil
}
