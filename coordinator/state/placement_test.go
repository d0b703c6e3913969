package state_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func placeAllCmd(ps ...*corpusv1.PlaceGuest) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: ps}}}
}

func placement(guest, node string, modifyIndex uint64) *corpusv1.PlaceGuest {
	return &corpusv1.PlaceGuest{GuestId: guest, NodeId: node, ModifyIndex: modifyIndex}
}

func modeCmd(node, mode, eligibility string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetNodeMode{SetNodeMode: &corpusv1.SetNodeMode{NodeId: node, Mode: mode, Eligibility: eligibility}}}
}

var newVolume = &corpusv1.VolumeSpec{SizeBytes: 1 << 30, Path: "/srv/data"}

// twoNodes is cluster plus a ready node n2 (indexes 5 to 7).
func twoNodes() []*corpusv1.Command {
	return append(cluster(),
		tokenCmd("tok2", "hash2", epoch.Add(time.Hour)),
		enrollCmd("tok2", "hash2", "n2id", "n2"),
		updateNodeCmd("n2id", 8<<30),
	)
}

// guestIndex is the modify index of a guest as the replica has it.
func (r *replica) guestIndex(id string) uint64 {
	return r.store.Read().Guest(id).GetModifyIndex()
}

func TestPlaceGuests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		setup   []*corpusv1.Command
		place   func(r *replica) *corpusv1.Command
		wantErr error
		check   func(t *testing.T, v *state.Snap)
	}{
		{
			name:  "places every guest of the plan in one entry",
			setup: append(twoNodes(), guestCmd("g1", "a"), guestCmd("g2", "b")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement("g1", nodeID, r.guestIndex("g1")), placement("g2", "n2id", r.guestIndex("g2")))
			},
			check: func(t *testing.T, v *state.Snap) {
				a, b := v.Guest("g1"), v.Guest("g2")
				if a.NodeId != nodeID || b.NodeId != "n2id" || a.Address == "" || b.Address == "" {
					t.Errorf("guests = %v, %v; want a on n1, b on n2, both with addresses", a, b)
				}
			},
		},
		{
			name: "a driver with its own network takes no node address",
			setup: append(twoNodes(), guestCmd("g1", "a"), kubeGuestCmd("g2", "b"),
				&corpusv1.Command{Cmd: &corpusv1.Command_UpdateNode{UpdateNode: &corpusv1.UpdateNode{
					NodeId: "n2id", Capacity: &corpusv1.Resources{MemoryBytes: 8 << 30, CpuMillis: 4000, DiskBytes: 100 << 30},
					Drivers: []*corpusv1.DriverInfo{{Name: "kubernetes", Healthy: true, OwnNetwork: true}}, AgentVersion: "test",
				}}}),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement("g1", nodeID, r.guestIndex("g1")), placement("g2", "n2id", r.guestIndex("g2")))
			},
			check: func(t *testing.T, v *state.Snap) {
				a, b := v.Guest("g1"), v.Guest("g2")
				if a.NodeId != nodeID || a.Address == "" || b.NodeId != "n2id" || b.Address != "" {
					t.Errorf("guests = %v, %v; want a on n1 with an address, b on n2 without", a, b)
				}
			},
		},
		{
			name:  "a stale placement is skipped, the others kept",
			setup: append(twoNodes(), guestCmd("g1", "a"), guestCmd("g2", "b")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement("g1", nodeID, 1), placement("g2", "n2id", r.guestIndex("g2")))
			},
			check: func(t *testing.T, v *state.Snap) {
				if a, b := v.Guest("g1"), v.Guest("g2"); a.NodeId != "" || b.NodeId != "n2id" {
					t.Errorf("guests on %q and %q, want a unplaced (stale), b on n2", a.NodeId, b.NodeId)
				}
			},
		},
		{
			name:    "nothing left valid changes nothing",
			setup:   append(twoNodes(), guestCmd("g1", "a")),
			place:   func(r *replica) *corpusv1.Command { return placeAllCmd(placement("g1", nodeID, 1)) },
			wantErr: state.ErrStale,
		},
		{
			name:    "a node that is down takes nothing",
			setup:   append(twoNodes(), guestCmd("g1", "a"), nodeStatusCmd("n2id", state.NodeDown)),
			place:   func(r *replica) *corpusv1.Command { return placeAllCmd(placement("g1", "n2id", r.guestIndex("g1"))) },
			wantErr: state.ErrStale,
		},
		{
			name:    "a draining node takes nothing",
			setup:   append(twoNodes(), guestCmd("g1", "a"), modeCmd("n2id", state.ModeDrain, "")),
			place:   func(r *replica) *corpusv1.Command { return placeAllCmd(placement("g1", "n2id", r.guestIndex("g1"))) },
			wantErr: state.ErrStale,
		},
		{
			name:    "an ineligible node takes nothing",
			setup:   append(twoNodes(), guestCmd("g1", "a"), modeCmd("n2id", "", corpusv1.Ineligible)),
			place:   func(r *replica) *corpusv1.Command { return placeAllCmd(placement("g1", "n2id", r.guestIndex("g1"))) },
			wantErr: state.ErrStale,
		},
		{
			name:  "a full node takes what fits",
			setup: append(cluster()[:3], updateNodeCmd(nodeID, 300<<20), guestCmd("g1", "a"), guestCmd("g2", "b")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement("g1", nodeID, r.guestIndex("g1")), placement("g2", nodeID, r.guestIndex("g2")))
			},
			check: func(t *testing.T, v *state.Snap) {
				if a, b := v.Guest("g1"), v.Guest("g2"); a.NodeId != nodeID || b.NodeId != "" {
					t.Errorf("guests on %q and %q, want a on n1 and b refused (300 MiB hold one 256 MiB guest)", a.NodeId, b.NodeId)
				}
			},
		},
		{
			name:  "a guest missing a required label is refused",
			setup: append(twoNodes(), constrainedGuestCmd("g1", "a", "zone", "a")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement("g1", nodeID, r.guestIndex("g1")))
			},
			wantErr: state.ErrStale,
		},
		{
			name:  "a reason for an unplaced guest",
			setup: append(twoNodes(), guestCmd("g1", "a")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(&corpusv1.PlaceGuest{GuestId: "g1", Reason: "no node fits", ModifyIndex: r.guestIndex("g1")})
			},
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest("g1"); g.PendingReason != "no node fits" || g.NodeId != "" {
					t.Errorf("guest = %v, want pending with the reason", g)
				}
			},
		},
		{
			name:  "no reason for a guest running on a ready node",
			setup: append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8)),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(&corpusv1.PlaceGuest{GuestId: guestID, Reason: "why", ModifyIndex: r.guestIndex(guestID)})
			},
			wantErr: state.ErrBadTransition,
		},
		{
			name:  "a stateless guest of a down node moves at once",
			setup: append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8), nodeStatusCmd(nodeID, state.NodeDown)),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement(guestID, "n2id", r.guestIndex(guestID)))
			},
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				if g.NodeId != "n2id" || g.PreviousNodeId != "" || !strings.HasPrefix(g.Address, "10.210.1.") {
					t.Errorf("guest = %v, want it on n2 with an address of n2's subnet, no old copy awaited", g)
				}
				if !strings.HasSuffix(eventTypes(g), "rescheduled") || g.Observed != nil {
					t.Errorf("guest events %s, observed %v; want rescheduled last and nothing observed yet", eventTypes(g), g.Observed)
				}
			},
		},
		{
			name:  "a guest with a volume stays on its down node",
			setup: append(twoNodes(), volumeGuestCmd(guestID, guestName, newVolume), placeCmd(guestID, nodeID, "", 8), nodeStatusCmd(nodeID, state.NodeDown)),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement(guestID, "n2id", r.guestIndex(guestID)))
			},
			wantErr: state.ErrBadTransition,
		},
		{
			name:  "a guest of a ready node stays",
			setup: append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8)),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement(guestID, "n2id", r.guestIndex(guestID)))
			},
			wantErr: state.ErrBadTransition,
		},
		{
			name:  "a stateless guest of a draining node migrates",
			setup: append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8), modeCmd(nodeID, state.ModeDrain, "")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement(guestID, "n2id", r.guestIndex(guestID)))
			},
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				if g.NodeId != "n2id" || g.PreviousNodeId != nodeID || g.PreviousAddress != "10.210.0.2" || g.Address != "10.210.1.2" {
					t.Errorf("guest = %v, want it on n2 at 10.210.1.2 with the old copy on n1 at 10.210.0.2", g)
				}
				if got := v.GuestsLeaving(nodeID); len(got) != 1 {
					t.Errorf("GuestsLeaving(n1) = %v, want the guest", got)
				}
				if got := v.NodeAllocated(nodeID).GetMemoryBytes(); got != 256<<20 {
					t.Errorf("NodeAllocated(n1) = %d bytes of memory, want the old copy's 256 MiB", got)
				}
			},
		},
		{
			name: "a migrating guest does not migrate again",
			setup: append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8), modeCmd(nodeID, state.ModeDrain, ""),
				placeAllCmd(placement(guestID, "n2id", 0)), modeCmd("n2id", state.ModeDrain, ""), modeCmd(nodeID, state.ModeDev, "")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement(guestID, nodeID, r.guestIndex(guestID)))
			},
			wantErr: state.ErrBadTransition,
		},
		{
			name:  "a stopped guest of a draining node just moves",
			setup: append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8), desiredCmd(guestName, state.DesiredStopped), modeCmd(nodeID, state.ModeDrain, "")),
			place: func(r *replica) *corpusv1.Command {
				return placeAllCmd(placement(guestID, "n2id", r.guestIndex(guestID)))
			},
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g.NodeId != "n2id" || g.PreviousNodeId != "" {
					t.Errorf("guest = %v, want it on n2 without an old copy to wait for", g)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if v := applyCase(t, tt.setup, tt.place, tt.wantErr); v != nil && tt.check != nil {
				tt.check(t, v)
			}
		})
	}
}

func constrainedGuestCmd(id, name string, kv ...string) *corpusv1.Command {
	c := guestCmd(id, name)
	spec := c.GetCreateGuest().Guest.Spec
	spec.Constraints = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		spec.Constraints[kv[i]] = kv[i+1]
	}
	return c
}

// TestMigrationEnds: the migration of a running guest ends when its new
// node reports it running, not before, and not on the old node's word.
func TestMigrationEnds(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8), modeCmd(nodeID, state.ModeDrain, ""))...)
	r.must(placeAllCmd(placement(guestID, "n2id", r.guestIndex(guestID))))
	steps := []struct {
		report  *corpusv1.Command
		leaving bool
	}{
		{reportCmd(nodeID, guestID, state.ObservedRunning, ""), true},        // the old copy: not this guest's node any more
		{reportCmd("n2id", guestID, state.ObservedCreating, ""), true},       // the new one is not there yet
		{reportCmd("n2id", guestID, state.ObservedFailed, "no image"), true}, // nor now
		{reportCmd("n2id", guestID, state.ObservedRunning, ""), false},
	}
	for _, s := range steps {
		r.must(s.report)
		g := r.store.Read().Guest(guestID)
		if leaving := g.PreviousNodeId != ""; leaving != s.leaving {
			t.Fatalf("after %v: old copy kept = %v, want %v", s.report, leaving, s.leaving)
		}
	}
	if g := r.store.Read().Guest(guestID); !strings.HasSuffix(eventTypes(g), "migrated") || g.PreviousAddress != "" {
		t.Errorf("guest = %v (events %s), want migrated last and no old address", g, eventTypes(g))
	}
}

func TestSetNodeMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cmd        *corpusv1.Command
		wantErr    error
		mode       string
		ineligible bool
	}{
		{"prod", modeCmd(nodeID, state.ModeProd, ""), nil, "prod", false},
		{"drain", modeCmd(nodeID, state.ModeDrain, ""), nil, "drain", false},
		{"ineligible keeps the mode", modeCmd(nodeID, "", corpusv1.Ineligible), nil, "dev", true},
		{"unknown mode", modeCmd(nodeID, "yolo", ""), state.ErrInvalid, "", false},
		{"unknown eligibility", modeCmd(nodeID, "", "maybe"), state.ErrInvalid, "", false},
		{"unknown node", modeCmd("nope", state.ModeProd, ""), state.ErrNotFound, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newReplica(t)
			r.must(cluster()...)
			if err := r.apply(tt.cmd); !errors.Is(err, tt.wantErr) || err != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Apply(%v) = %v, want %v", tt.cmd, err, tt.wantErr)
				}
				return
			}
			if n := r.store.Read().Node(nodeID); n.Mode != tt.mode || n.Ineligible != tt.ineligible {
				t.Errorf("node = mode %q ineligible %v, want %q %v", n.Mode, n.Ineligible, tt.mode, tt.ineligible)
			}
		})
	}
	r := newReplica(t)
	r.must(append(cluster(), modeCmd(nodeID, "", corpusv1.Ineligible), modeCmd(nodeID, "", corpusv1.Eligible))...)
	if r.store.Read().Node(nodeID).Ineligible {
		t.Errorf("node still ineligible after eligible")
	}
}

// TestNodeDown: a node going down forgets the deletes it can no longer
// confirm (its agent removes the rest when it returns), a delete on a down
// node is immediate, and the reasons of guests kept there go when it is
// back.
func TestNodeDown(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(twoNodes(), guestCmd("g1", "a"), guestCmd("g2", "b"), volumeGuestCmd("g3", "c", newVolume))...)
	r.must(placeAllCmd(placement("g1", nodeID, 0), placement("g2", nodeID, 0), placement("g3", nodeID, 0)))
	r.must(desiredCmd("a", state.DesiredDeleted), nodeStatusCmd(nodeID, state.NodeDown))
	v := r.store.Read()
	if v.Guest("g1") != nil {
		t.Errorf("guest a, being deleted when its node went down, is still there")
	}
	r.must(desiredCmd("c", state.DesiredDeleted))
	v = r.store.Read()
	if v.Guest("g3") != nil {
		t.Errorf("guest c deleted on a down node is still there")
	}
	if vol := v.Volume("c"); vol == nil || vol.GuestId != "" || vol.NodeId != nodeID {
		t.Errorf("volume of c = %v, want it kept, unbound, on n1", vol)
	}
	r.must(placeAllCmd(&corpusv1.PlaceGuest{GuestId: "g2", Reason: "no node fits", ModifyIndex: r.guestIndex("g2")}))
	if got := r.store.Read().Guest("g2").PendingReason; got != "no node fits" {
		t.Fatalf("reason of b on the down node = %q", got)
	}
	r.must(updateNodeCmd(nodeID, 8<<30))
	if got := r.store.Read().Guest("g2").PendingReason; got != "" {
		t.Errorf("reason of b after its node is back = %q, want none", got)
	}
}

// TestSnapshotKeepsMigrations: a restored replica knows which guests are
// leaving which node.
func TestSnapshotKeepsMigrations(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(twoNodes(), guestCmd(guestID, guestName), placeCmd(guestID, nodeID, "", 8), modeCmd(nodeID, state.ModeDrain, ""))...)
	r.must(placeAllCmd(placement(guestID, "n2id", r.guestIndex(guestID))))
	restored := newReplica(t)
	if err := restored.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := restored.store.Read().GuestsLeaving(nodeID); len(got) != 1 || got[0].Id != guestID {
		t.Errorf("GuestsLeaving(n1) after restore = %v, want the migrating guest", got)
	}
}

func kubeGuestCmd(id, name string) *corpusv1.Command {
	c := guestCmd(id, name)
	spec := c.GetCreateGuest().Guest.Spec
	spec.Driver, spec.Image = "kubernetes", "registry.example/app:1"
	return c
}
