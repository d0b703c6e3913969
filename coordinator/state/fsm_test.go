package state_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func TestApply(t *testing.T) {
	t.Parallel()
	secondToken := tokenCmd("tok2", "hash2", epoch.Add(time.Hour))
	tests := []struct {
		name    string
		setup   []*corpusv1.Command
		cmd     *corpusv1.Command
		wantErr error
		check   func(t *testing.T, v *state.Snap)
	}{
		// BootstrapCluster
		{
			name: "bootstrap",
			cmd:  bootstrapCmd("c1"),
			check: func(t *testing.T, v *state.Snap) {
				if got := v.Config().GetClusterId(); got != "c1" {
					t.Errorf("Config().ClusterId = %q, want c1", got)
				}
			},
		},
		{name: "bootstrap twice", setup: []*corpusv1.Command{bootstrapCmd("c1")}, cmd: bootstrapCmd("c2"), wantErr: state.ErrExists},
		{name: "bootstrap without cluster id", cmd: bootstrapCmd(""), wantErr: state.ErrInvalid},
		{
			name:    "bootstrap without config",
			cmd:     &corpusv1.Command{Cmd: &corpusv1.Command_BootstrapCluster{BootstrapCluster: &corpusv1.BootstrapCluster{}}},
			wantErr: state.ErrInvalid,
		},

		// CreateJoinToken
		{
			name: "create join token",
			cmd:  tokenCmd(tokenID, tokenHash, epoch.Add(time.Hour)),
			check: func(t *testing.T, v *state.Snap) {
				tok := v.Token(tokenID)
				if tok == nil || tok.UsedBy != "" || tok.SecretHash != tokenHash {
					t.Errorf("Token(%s) = %v, want an unused token with hash %s", tokenID, tok, tokenHash)
				}
			},
		},
		{
			name:    "create join token twice",
			setup:   []*corpusv1.Command{tokenCmd(tokenID, tokenHash, epoch.Add(time.Hour))},
			cmd:     tokenCmd(tokenID, "other", epoch.Add(time.Hour)),
			wantErr: state.ErrExists,
		},
		{name: "create join token without id", cmd: tokenCmd("", tokenHash, epoch.Add(time.Hour)), wantErr: state.ErrInvalid},

		// EnrollNode
		{
			name:  "enroll",
			setup: []*corpusv1.Command{bootstrapCmd("c1"), tokenCmd(tokenID, tokenHash, epoch.Add(time.Hour))},
			cmd:   enrollCmd(tokenID, tokenHash, nodeID, nodeName),
			check: func(t *testing.T, v *state.Snap) {
				n := v.NodeByName(nodeName)
				if n == nil {
					t.Fatalf("NodeByName(%s) = nil, want the enrolled node", nodeName)
				}
				if n.Id != nodeID || n.Status != state.NodeInitializing || n.CreateIndex != 3 || n.ModifyIndex != 3 || !n.EnrolledAt.AsTime().Equal(epoch) {
					t.Errorf("NodeByName(%s) = %v, want id %s, initializing, indexes 3, enrolled at %v", nodeName, n, nodeID, epoch)
				}
				if got := v.Token(tokenID).GetUsedBy(); got != nodeID {
					t.Errorf("Token(%s).UsedBy = %q, want %s", tokenID, got, nodeID)
				}
			},
		},
		{name: "enroll with a used token", setup: cluster(), cmd: enrollCmd(tokenID, tokenHash, "n2id", "n2"), wantErr: state.ErrInvalidToken},
		{
			name:    "enroll with a token expiring now",
			setup:   []*corpusv1.Command{tokenCmd(tokenID, tokenHash, epoch)},
			cmd:     enrollCmd(tokenID, tokenHash, nodeID, nodeName),
			wantErr: state.ErrInvalidToken,
		},
		{
			name:    "enroll with an expired token",
			setup:   []*corpusv1.Command{tokenCmd(tokenID, tokenHash, epoch.Add(-time.Hour))},
			cmd:     enrollCmd(tokenID, tokenHash, nodeID, nodeName),
			wantErr: state.ErrInvalidToken,
		},
		{
			name:    "enroll with the wrong secret",
			setup:   []*corpusv1.Command{tokenCmd(tokenID, tokenHash, epoch.Add(time.Hour))},
			cmd:     enrollCmd(tokenID, "hash-of-guess", nodeID, nodeName),
			wantErr: state.ErrInvalidToken,
		},
		{name: "enroll with an unknown token", cmd: enrollCmd("nope", tokenHash, nodeID, nodeName), wantErr: state.ErrInvalidToken},
		{
			name:    "enroll under a taken name leaves the token unused",
			setup:   append(cluster(), secondToken),
			cmd:     enrollCmd("tok2", "hash2", "n2id", nodeName),
			wantErr: state.ErrExists,
		},
		{
			// Insert would replace node n1 and hand its guests over.
			name:    "enroll under a taken id",
			setup:   append(cluster(), secondToken),
			cmd:     enrollCmd("tok2", "hash2", nodeID, "n2"),
			wantErr: state.ErrExists,
		},
		{
			name:    "enroll without a node name",
			setup:   []*corpusv1.Command{tokenCmd(tokenID, tokenHash, epoch.Add(time.Hour))},
			cmd:     enrollCmd(tokenID, tokenHash, nodeID, ""),
			wantErr: state.ErrInvalid,
		},

		// UpdateNode, SetNodeStatus
		{
			name:  "update node makes it ready",
			setup: cluster()[:3],
			cmd:   updateNodeCmd(nodeID, 8<<30),
			check: func(t *testing.T, v *state.Snap) {
				n := v.Node(nodeID)
				if n.Status != state.NodeReady || n.Capacity.GetMemoryBytes() != 8<<30 || len(n.Drivers) != 1 || n.AgentAddress == "" || n.ModifyIndex != 4 {
					t.Errorf("Node(%s) = %v, want ready with 8 GiB, one driver, an address, modify index 4", nodeID, n)
				}
				if n.CertSerial != "node-serial" || n.CreateIndex != 3 {
					t.Errorf("Node(%s) = %v, want secret hash and create index kept", nodeID, n)
				}
			},
		},
		{name: "update an unknown node", cmd: updateNodeCmd("nope", 1), wantErr: state.ErrNotFound},
		{
			name:  "set node status",
			setup: cluster(),
			cmd:   nodeStatusCmd(nodeID, state.NodeDown),
			check: func(t *testing.T, v *state.Snap) {
				if got := v.Node(nodeID).Status; got != state.NodeDown {
					t.Errorf("Node(%s).Status = %q, want %q", nodeID, got, state.NodeDown)
				}
			},
		},
		{name: "set the status of an unknown node", cmd: nodeStatusCmd("nope", state.NodeDown), wantErr: state.ErrNotFound},

		// CreateGuest
		{
			name:  "create guest",
			setup: cluster(),
			cmd:   guestCmd(guestID, guestName),
			check: func(t *testing.T, v *state.Snap) {
				g := v.GuestByName(guestName)
				if g == nil {
					t.Fatalf("GuestByName(%s) = nil, want the guest", guestName)
				}
				if g.Id != guestID || g.CreateIndex != 5 || g.ModifyIndex != 5 || g.NodeId != "" || !g.CreatedAt.AsTime().Equal(epoch) {
					t.Errorf("GuestByName(%s) = %v, want id %s, indexes 5, unplaced, created at %v", guestName, g, guestID, epoch)
				}
				if types := eventTypes(g); types != "created" {
					t.Errorf("GuestByName(%s) events = %s, want created", guestName, types)
				}
			},
		},
		{
			name: "create guest drops fields only the cluster sets",
			cmd: func() *corpusv1.Command {
				c := guestCmd(guestID, guestName)
				g := c.GetCreateGuest().Guest
				g.NodeId = nodeID
				g.Observed = &corpusv1.GuestObserved{State: state.ObservedRunning}
				g.Events = []*corpusv1.Event{{Type: "forged"}}
				return c
			}(),
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				if g.NodeId != "" || g.Observed != nil || eventTypes(g) != "created" {
					t.Errorf("Guest(%s) = %v, want no node, no observation, only the created event", guestID, g)
				}
			},
		},
		{name: "create guest with a taken name", setup: withGuest(), cmd: guestCmd("g2id", guestName), wantErr: state.ErrExists},
		{name: "create guest with a taken id", setup: withGuest(), cmd: guestCmd(guestID, "api"), wantErr: state.ErrExists},
		{name: "create guest without a name", cmd: guestCmd(guestID, ""), wantErr: state.ErrInvalid},
		{
			name: "create guest already deleted",
			cmd: func() *corpusv1.Command {
				c := guestCmd(guestID, guestName)
				c.GetCreateGuest().Guest.DesiredState = state.DesiredDeleted
				return c
			}(),
			wantErr: state.ErrInvalid,
		},
		{
			name: "create guest without a desired state",
			cmd: func() *corpusv1.Command {
				c := guestCmd(guestID, guestName)
				c.GetCreateGuest().Guest.DesiredState = ""
				return c
			}(),
			wantErr: state.ErrInvalid,
		},
		{
			name:    "create guest without a guest",
			cmd:     &corpusv1.Command{Cmd: &corpusv1.Command_CreateGuest{CreateGuest: &corpusv1.CreateGuest{}}},
			wantErr: state.ErrInvalid,
		},

		// UpdateGuest
		{
			name:  "update a pending guest",
			setup: withGuest(),
			cmd:   updateGuestCmd(guestName, func(sp *corpusv1.GuestSpec) { sp.Image = "alpine" }),
			check: func(t *testing.T, v *state.Snap) {
				g := v.GuestByName(guestName)
				if g.Spec.Image != "alpine" || g.ModifyIndex != 6 || !strings.HasSuffix(eventTypes(g), "updated") {
					t.Errorf("GuestByName(%s) = %v, want image alpine, modify index 6, an updated event", guestName, g)
				}
			},
		},
		{
			name:    "update a guest on a driver that cannot converge",
			setup:   withPlacedGuest(),
			cmd:     updateGuestCmd(guestName, func(sp *corpusv1.GuestSpec) { sp.Image = "alpine" }),
			wantErr: state.ErrBadTransition,
		},
		{
			name: "update a guest on a driver that converges",
			setup: append(withPlacedGuest(), func() *corpusv1.Command {
				c := updateNodeCmd(nodeID, 8<<30)
				c.GetUpdateNode().Drivers[0].Converge = true
				return c
			}()),
			cmd: updateGuestCmd(guestName, func(sp *corpusv1.GuestSpec) { sp.Image = "alpine"; sp.Resources.MemoryBytes = 1 << 30 }),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.GuestByName(guestName); g.Spec.Image != "alpine" || g.Spec.Resources.MemoryBytes != 1<<30 {
					t.Errorf("GuestByName(%s).Spec = %v, want alpine with 1 GiB", guestName, g.Spec)
				}
			},
		},
		{
			name: "update a guest beyond its node",
			setup: append(withPlacedGuest(), func() *corpusv1.Command {
				c := updateNodeCmd(nodeID, 8<<30)
				c.GetUpdateNode().Drivers[0].Converge = true
				return c
			}()),
			cmd:     updateGuestCmd(guestName, func(sp *corpusv1.GuestSpec) { sp.Resources.MemoryBytes = 9 << 30 }),
			wantErr: state.ErrNoRoom,
		},
		{
			// Only what grows must fit: a node that holds more memory
			// than it reports now (its capacity shrank) still takes an
			// update that adds cpu alone.
			name: "update a guest on a node short of memory, growing its cpu",
			setup: append(withPlacedGuest(), func() *corpusv1.Command {
				c := updateNodeCmd(nodeID, 128<<20)
				c.GetUpdateNode().Drivers[0].Converge = true
				return c
			}()),
			cmd: updateGuestCmd(guestName, func(sp *corpusv1.GuestSpec) { sp.Resources.CpuMillis = 500 }),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.GuestByName(guestName); g.Spec.Resources.CpuMillis != 500 {
					t.Errorf("GuestByName(%s).Spec = %v, want 500m", guestName, g.Spec)
				}
			},
		},
		{
			name:    "update a guest's driver",
			setup:   withGuest(),
			cmd:     updateGuestCmd(guestName, func(sp *corpusv1.GuestSpec) { sp.Driver = "kubernetes" }),
			wantErr: state.ErrInvalid,
		},
		{
			name:    "update a guest's volume",
			setup:   withGuest(),
			cmd:     updateGuestCmd(guestName, func(sp *corpusv1.GuestSpec) { sp.Volume = &corpusv1.VolumeSpec{SizeBytes: 1 << 30} }),
			wantErr: state.ErrInvalid,
		},
		{name: "update an unknown guest", cmd: updateGuestCmd("nope", func(*corpusv1.GuestSpec) {}), wantErr: state.ErrNotFound},

		// SetGuestDesired
		{
			name:  "stop guest",
			setup: withGuest(),
			cmd:   desiredCmd(guestName, state.DesiredStopped),
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				if g.DesiredState != state.DesiredStopped || g.ModifyIndex != 6 || eventTypes(g) != "created,desired" {
					t.Errorf("Guest(%s) = %v, want stopped, modify index 6, events created,desired", guestID, g)
				}
			},
		},
		{
			name:  "the same desired state changes nothing",
			setup: withGuest(),
			cmd:   desiredCmd(guestName, state.DesiredRunning),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g.ModifyIndex != 5 || len(g.Events) != 1 {
					t.Errorf("Guest(%s) = %v, want it untouched (modify index 5, one event)", guestID, g)
				}
			},
		},
		{name: "unknown desired state", setup: withGuest(), cmd: desiredCmd(guestName, "paused"), wantErr: state.ErrInvalid},
		{name: "desired state of an unknown guest", cmd: desiredCmd("nope", state.DesiredStopped), wantErr: state.ErrNotFound},
		{
			name:  "deleting an unplaced guest removes it",
			setup: withGuest(),
			cmd:   desiredCmd(guestName, state.DesiredDeleted),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.GuestByName(guestName); g != nil {
					t.Errorf("GuestByName(%s) = %v, want nil", guestName, g)
				}
			},
		},
		{
			name:  "deleting a placed guest waits for its agent",
			setup: withPlacedGuest(),
			cmd:   desiredCmd(guestName, state.DesiredDeleted),
			check: func(t *testing.T, v *state.Snap) {
				g := v.GuestByName(guestName)
				if g == nil || g.DesiredState != state.DesiredDeleted || g.NodeId != nodeID {
					t.Errorf("GuestByName(%s) = %v, want it kept on %s with desired state deleted", guestName, g, nodeID)
				}
			},
		},
		{
			name:    "starting a guest being deleted",
			setup:   append(withPlacedGuest(), desiredCmd(guestName, state.DesiredDeleted)),
			cmd:     desiredCmd(guestName, state.DesiredRunning),
			wantErr: state.ErrBadTransition,
		},

		// PlaceGuest
		{
			name:  "place guest",
			setup: append(withGuest(), placeCmd(guestID, "", "no room", 5)),
			cmd:   placeCmd(guestID, nodeID, "", 6),
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				if g.NodeId != nodeID || g.PendingReason != "" || g.ModifyIndex != 7 || eventTypes(g) != "created,pending,placed" {
					t.Errorf("Guest(%s) = %v, want placed on %s, no reason, modify index 7, events created,pending,placed", guestID, g, nodeID)
				}
				if got := v.GuestsOnNode(nodeID); len(got) != 1 || got[0].Id != guestID {
					t.Errorf("GuestsOnNode(%s) = %v, want [%s]", nodeID, got, guestName)
				}
			},
		},
		{name: "place from a stale view", setup: withGuest(), cmd: placeCmd(guestID, nodeID, "", 4), wantErr: state.ErrStale},
		{
			name:  "place without a modify index guard",
			setup: withGuest(),
			cmd:   placeCmd(guestID, nodeID, "", 0),
			check: func(t *testing.T, v *state.Snap) {
				if got := v.Guest(guestID).NodeId; got != nodeID {
					t.Errorf("Guest(%s).NodeId = %q, want %s", guestID, got, nodeID)
				}
			},
		},
		{name: "place a placed guest", setup: withPlacedGuest(), cmd: placeCmd(guestID, nodeID, "", 6), wantErr: state.ErrBadTransition},
		{name: "place on an unknown node", setup: withGuest(), cmd: placeCmd(guestID, "nope", "", 5), wantErr: state.ErrNotFound},
		{name: "place an unknown guest", setup: cluster(), cmd: placeCmd("nope", nodeID, "", 0), wantErr: state.ErrNotFound},
		{
			name:  "record a pending reason",
			setup: withGuest(),
			cmd:   placeCmd(guestID, "", "no node fits", 5),
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				if g.NodeId != "" || g.PendingReason != "no node fits" || g.ModifyIndex != 6 || eventTypes(g) != "created,pending" {
					t.Errorf("Guest(%s) = %v, want unplaced, reason recorded, modify index 6, events created,pending", guestID, g)
				}
			},
		},
		{
			name:  "the same pending reason writes nothing",
			setup: append(withGuest(), placeCmd(guestID, "", "no node fits", 5)),
			cmd:   placeCmd(guestID, "", "no node fits", 6),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g.ModifyIndex != 6 || len(g.Events) != 2 {
					t.Errorf("Guest(%s) = %v, want it untouched (modify index 6, two events)", guestID, g)
				}
			},
		},

		// ReportGuests
		{
			name:  "report an observation",
			setup: withPlacedGuest(),
			cmd:   reportCmd(nodeID, guestID, state.ObservedRunning, ""),
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				o := g.Observed
				if o.GetState() != state.ObservedRunning || o.GetPid() != 42 || !o.GetUpdatedAt().AsTime().Equal(epoch) || g.ModifyIndex != 7 {
					t.Errorf("Guest(%s) = %v, want observed running, pid 42, updated at %v, modify index 7", guestID, g, epoch)
				}
				if ev := g.Events[len(g.Events)-1]; ev.Type != "observed" || ev.Message != state.ObservedRunning {
					t.Errorf("Guest(%s) last event = %v, want observed: running", guestID, ev)
				}
			},
		},
		{
			name:  "an unchanged observation writes nothing",
			setup: append(withPlacedGuest(), reportCmd(nodeID, guestID, state.ObservedRunning, "")),
			cmd:   reportCmd(nodeID, guestID, state.ObservedRunning, ""),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g.ModifyIndex != 7 || len(g.Events) != 3 {
					t.Errorf("Guest(%s) = %v, want it untouched (modify index 7, three events)", guestID, g)
				}
			},
		},
		{
			name:  "a new failure message is a new event",
			setup: append(withPlacedGuest(), reportCmd(nodeID, guestID, state.ObservedFailed, "exit 1")),
			cmd:   reportCmd(nodeID, guestID, state.ObservedFailed, "exit 2"),
			check: func(t *testing.T, v *state.Snap) {
				g := v.Guest(guestID)
				if ev := g.Events[len(g.Events)-1]; ev.Message != "failed: exit 2" || len(g.Events) != 4 {
					t.Errorf("Guest(%s) events = %v, want four ending in failed: exit 2", guestID, g.Events)
				}
			},
		},
		{
			name:  "a report from another node is ignored",
			setup: append(withPlacedGuest(), secondToken, enrollCmd("tok2", "hash2", "n2id", "n2")),
			cmd:   reportCmd("n2id", guestID, state.ObservedDeleted, ""),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g == nil || g.Observed != nil || g.ModifyIndex != 6 {
					t.Errorf("Guest(%s) = %v, want it untouched (no observation, modify index 6)", guestID, g)
				}
			},
		},
		{
			name:  "a report on an unplaced guest is ignored",
			setup: withGuest(),
			cmd:   reportCmd(nodeID, guestID, state.ObservedRunning, ""),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g.Observed != nil || g.ModifyIndex != 5 {
					t.Errorf("Guest(%s) = %v, want it untouched", guestID, g)
				}
			},
		},
		{
			name:  "a report on an unknown guest is skipped",
			setup: cluster(),
			cmd:   reportCmd(nodeID, "nope", state.ObservedRunning, ""),
		},
		{name: "a report from an unknown node", setup: withPlacedGuest(), cmd: reportCmd("nope", guestID, state.ObservedRunning, ""), wantErr: state.ErrNotFound},
		{
			name:  "a deleted report removes a guest being deleted",
			setup: append(withPlacedGuest(), desiredCmd(guestName, state.DesiredDeleted)),
			cmd:   reportCmd(nodeID, guestID, state.ObservedDeleted, ""),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g != nil {
					t.Errorf("Guest(%s) = %v, want nil", guestID, g)
				}
				if got := v.GuestsOnNode(nodeID); len(got) != 0 {
					t.Errorf("GuestsOnNode(%s) = %v, want none", nodeID, got)
				}
			},
		},
		{
			name:  "a deleted report keeps a guest not being deleted",
			setup: withPlacedGuest(),
			cmd:   reportCmd(nodeID, guestID, state.ObservedDeleted, ""),
			check: func(t *testing.T, v *state.Snap) {
				if g := v.Guest(guestID); g == nil || g.Observed.GetState() != state.ObservedDeleted {
					t.Errorf("Guest(%s) = %v, want it kept, observed deleted", guestID, g)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := applyCase(t, tt.setup, func(*replica) *corpusv1.Command { return tt.cmd }, tt.wantErr)
			if v != nil && tt.check != nil {
				tt.check(t, v)
			}
		})
	}
}

// applyCase runs one table case: the setup commands, then the command
// cmd makes, which must fail with wantErr (nil: succeed). A business
// error must change nothing, not even the index. It returns the state
// after a success, nil after an error.
func applyCase(t *testing.T, setup []*corpusv1.Command, cmd func(*replica) *corpusv1.Command, wantErr error) *state.Snap {
	t.Helper()
	r := newReplica(t)
	r.must(setup...)
	before := r.dump()
	c := cmd(r)
	err := r.apply(c)
	if !errors.Is(err, wantErr) {
		t.Fatalf("Apply(%v) = %v, want %v", c, err, wantErr)
	}
	if err != nil {
		if after := r.dump(); !proto.Equal(after, before) {
			t.Errorf("state after Apply(%v) = %v, want it unchanged: %v", c, after, before)
		}
		return nil
	}
	v := r.store.Read()
	if got := v.Index(); got != r.index {
		t.Errorf("Index() = %d, want %d", got, r.index)
	}
	return v
}

func eventTypes(g *corpusv1.Guest) string {
	var types []string
	for _, e := range g.GetEvents() {
		types = append(types, e.Type)
	}
	return strings.Join(types, ",")
}

func TestApplyBoundsEvents(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(withGuest()...)
	for i := range 30 {
		desired := state.DesiredStopped
		if i%2 == 1 {
			desired = state.DesiredRunning
		}
		r.now = epoch.Add(time.Duration(i+1) * time.Second)
		r.must(desiredCmd(guestName, desired))
	}
	g := r.store.Read().Guest(guestID)
	if len(g.Events) != 20 {
		t.Fatalf("len(Guest(%s).Events) = %d, want 20", guestID, len(g.Events))
	}
	// Oldest first, newest last: the 11th to the 30th change.
	if first, last := g.Events[0].Time.AsTime(), g.Events[19].Time.AsTime(); !first.Equal(epoch.Add(11*time.Second)) || !last.Equal(epoch.Add(30*time.Second)) {
		t.Errorf("Guest(%s) events span %v to %v, want %v to %v", guestID, first, last, epoch.Add(11*time.Second), epoch.Add(30*time.Second))
	}
}

func TestApplySkipsOtherLogTypes(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	for _, typ := range []raft.LogType{raft.LogNoop, raft.LogBarrier, raft.LogConfiguration} {
		if got := r.fsm.Apply(&raft.Log{Index: 1, Type: typ, Data: []byte("not a command")}); got != nil {
			t.Errorf("Apply(%v entry) = %v, want nil", typ, got)
		}
	}
	if got := r.store.Read().Index(); got != 0 {
		t.Errorf("Index() = %d, want 0", got)
	}
}

// unknownCommand is a command from a newer replica: a oneof field this
// version does not know, so it decodes with no Cmd.
func unknownCommand(t *testing.T, ignorable bool) []byte {
	t.Helper()
	data, err := state.Encode(&corpusv1.Command{Ignorable: ignorable}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	data = protowire.AppendTag(data, 99, protowire.BytesType)
	return protowire.AppendBytes(data, []byte("future"))
}

// newerVersion is a known command type in a newer encoding version.
func newerVersion(t *testing.T, ignorable bool) []byte {
	t.Helper()
	cmd := guestCmd(guestID, guestName)
	cmd.Ignorable = ignorable
	data, err := state.Encode(cmd, epoch)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Reset()
	if err := proto.Unmarshal(data, cmd); err != nil {
		t.Fatal(err)
	}
	cmd.Version = state.CommandVersion + 1
	data, err = proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestApplyPanicsOnBadEntries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		data       []byte
		wantPrefix string
	}{
		{"corrupt", []byte{0xff, 0xff, 0xff}, "state: corrupt raft entry at index 7"},
		{"truncated", func() []byte {
			b, _ := state.Encode(guestCmd(guestID, guestName), epoch)
			return b[:len(b)-3]
		}(), "state: corrupt raft entry at index 7"},
		{"unknown command", unknownCommand(t, false), "state: unknown command at index 7"},
		{"empty command", nil, "state: unknown command at index 7"},
		{"newer version", newerVersion(t, false), "state: unknown command at index 7 (version 2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newReplica(t)
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, tt.wantPrefix) {
					t.Errorf("Apply(%x) panicked with %q, want a panic starting %q", tt.data, msg, tt.wantPrefix)
				}
			}()
			r.fsm.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: tt.data})
		})
	}
}

func TestApplySkipsIgnorableCommands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data []byte
	}{
		{"unknown command", unknownCommand(t, true)},
		{"newer version", newerVersion(t, true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newReplica(t)
			r.must(cluster()...)
			before := r.dump()
			got := r.fsm.Apply(&raft.Log{Index: 5, Type: raft.LogCommand, Data: tt.data})
			if res, ok := got.(*state.Result); !ok || res.Err != nil || res.Index != 5 {
				t.Fatalf("Apply(ignorable) = %v, want &Result{Index: 5}", got)
			}
			if after := r.dump(); !proto.Equal(after, before) {
				t.Errorf("state after Apply(ignorable) = %v, want it unchanged: %v", after, before)
			}
		})
	}
}
