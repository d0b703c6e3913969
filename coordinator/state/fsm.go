package state

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/fit"
	"corpus/coordinator/state/auditentry"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// CommandVersion is the encoding version this replica writes and applies.
const CommandVersion = 1

// maxEvents bounds each guest's event history.
const maxEvents = 20

// Result is what applying one command returns to the proposer. Business
// failures (a taken name, a used token) are values in Err; they never stop
// the replica.
type Result struct {
	Index uint64
	Err   error
}

// FSM applies Raft log entries to a Store. It implements raft.FSM.
type FSM struct {
	store  *Store
	logger *slog.Logger
	// clampWarned is when an entry stamped before the cluster's time was
	// last logged.
	clampWarned time.Time
	// refused is why the last Restore refused its snapshot.
	refused error
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns a state machine over store.
func NewFSM(store *Store, logger *slog.Logger) *FSM {
	return &FSM{store: store, logger: logger}
}

// Encode marshals a command for the Raft log, stamping version and time.
func Encode(cmd *corpusv1.Command, now time.Time) ([]byte, error) {
	cmd.Version = CommandVersion
	cmd.Needs = needs(cmd)
	cmd.Now = timestamppb.New(now)
	return proto.Marshal(cmd)
}

// Apply applies one log entry and returns its *Result, or for a batch
// entry a []*Result, one a command in the batch's order. A corrupt entry
// or an unknown command that is not marked ignorable is a bug or a
// version skew that must not be papered over: it panics, stopping the
// replica loudly.
func (f *FSM) Apply(l *raft.Log) any {
	defer f.store.SetApplied(l.Index)
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd corpusv1.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		panic(fmt.Sprintf("state: corrupt raft entry at index %d: %v", l.Index, err))
	}
	if b := cmd.GetBatch(); b != nil && cmd.Version <= CommandVersion {
		return f.applyBatch(l.Index, &cmd, b)
	}
	res, _ := f.applyOne(l.Index, 0, &cmd, true)
	return res
}

// applyOne applies cmd, the command at position in the entry at index,
// in a transaction of its own, and reports whether it changed more than
// the audit log. last: it is the entry's last command, whose transaction
// records the entry's index (and trims the audit log every 100 entries).
func (f *FSM) applyOne(index uint64, position uint32, cmd *corpusv1.Command, last bool) (*Result, bool) {
	if cmd.Cmd == nil || cmd.Version > CommandVersion {
		if cmd.Ignorable {
			f.logger.Warn("skipping unknown ignorable command", "index", index, "version", cmd.Version)
			return &Result{Index: index}, false
		}
		panic(unknownEntry(index, cmd))
	}
	now := f.clusterTime(cmd.Now)
	txn := f.store.Write()
	defer txn.Abort()
	a := applier{txn: txn, index: index, now: now}
	err := a.apply(cmd)
	_, auditOnly := cmd.Cmd.(*corpusv1.Command_RecordAudit)
	if err != nil || auditOnly {
		// Business error, or a record for the audit log alone: nothing
		// changes but the audit log, not even the index row, so watchers
		// of the state are not woken for nothing.
		txn.Abort()
		f.audit(index, position, cmd, now, err, last)
		return &Result{Index: index, Err: err}, false
	}
	a.put(statedb.TableAudit, auditentry.Of(cmd, index, position, nil))
	if last {
		a.entryApplied()
	}
	txn.Commit()
	return &Result{Index: index}, true
}

// entryApplied ends the entry at a.index: the index row, which wakes
// every watcher of the state, and the audit log's trim every 100 entries.
func (a *applier) entryApplied() {
	if a.index%100 == 0 {
		a.trimAudit()
	}
	if err := a.txn.Insert(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaIndex, Value: a.index}); err != nil {
		panic(fmt.Sprintf("state: writing index: %v", err))
	}
}

// clusterTime is the time an entry stamped by its leader at stamp
// applies at: the stamp, unless an entry before it was stamped later (a
// leader whose clock stepped back, or runs behind the one before it);
// then that later time. The cluster's time never goes back, the same on
// every replica.
func (f *FSM) clusterTime(stamp *timestamppb.Timestamp) *timestamppb.Timestamp {
	if stamp == nil {
		return f.store.ClusterTime()
	}
	if last := f.store.ClusterTime(); last != nil && stamp.AsTime().Before(last.AsTime()) {
		if behind := last.AsTime().Sub(stamp.AsTime()); behind > time.Second && time.Since(f.clampWarned) > time.Minute {
			f.clampWarned = time.Now()
			f.logger.Warn("an entry's leader stamped it before the cluster's time; it applies at the cluster's time (a leader's clock is behind, or another's was ahead)",
				"behind", behind.Round(time.Millisecond), "cluster_time", last.AsTime())
		}
		return last
	}
	f.store.SetClusterTime(stamp)
	return stamp
}

type applier struct {
	txn   *memdb.Txn
	index uint64
	now   *timestamppb.Timestamp
}

func (a *applier) apply(cmd *corpusv1.Command) error {
	if err := a.gated(cmd); err != nil {
		return err
	}
	switch c := cmd.Cmd.(type) {
	case *corpusv1.Command_SetClusterVersion:
		return a.setClusterVersion(c.SetClusterVersion)
	case *corpusv1.Command_BootstrapCluster:
		return a.bootstrap(c.BootstrapCluster)
	case *corpusv1.Command_CreateJoinToken:
		return a.createToken(c.CreateJoinToken)
	case *corpusv1.Command_EnrollNode:
		return a.enroll(c.EnrollNode)
	case *corpusv1.Command_UpdateNode:
		return a.updateNode(c.UpdateNode)
	case *corpusv1.Command_ReportOrphans:
		return a.reportOrphans(c.ReportOrphans)
	case *corpusv1.Command_StartCaRotation:
		return a.startCaRotation(c.StartCaRotation)
	case *corpusv1.Command_AdvanceCaRotation:
		return a.advanceCaRotation(c.AdvanceCaRotation)
	case *corpusv1.Command_FinishCaRotation:
		return a.finishCaRotation(c.FinishCaRotation)
	case *corpusv1.Command_AbortCaRotation:
		return a.abortCaRotation(c.AbortCaRotation)
	case *corpusv1.Command_RejoinNode:
		return a.rejoinNode(c.RejoinNode)
	case *corpusv1.Command_RenewNodeCertificate:
		return a.renewNodeCertificate(c.RenewNodeCertificate)
	case *corpusv1.Command_SetNodeStatus:
		return a.setNodeStatus(c.SetNodeStatus)
	case *corpusv1.Command_CreateGuest:
		return a.createGuest(c.CreateGuest)
	case *corpusv1.Command_UpdateGuest:
		return a.updateGuest(c.UpdateGuest)
	case *corpusv1.Command_RecordAudit:
		return nil // the audit entry is all it leaves
	case *corpusv1.Command_SetGuestDesired:
		return a.setGuestDesired(c.SetGuestDesired)
	case *corpusv1.Command_PlaceGuest:
		return a.placeGuest(c.PlaceGuest)
	case *corpusv1.Command_ReportGuests:
		return a.reportGuests(c.ReportGuests)
	case *corpusv1.Command_CreateRoute:
		return a.createRoute(c.CreateRoute)
	case *corpusv1.Command_DeleteRoute:
		return a.deleteRoute(c.DeleteRoute)
	case *corpusv1.Command_MoveRoute:
		return a.moveRoute(c.MoveRoute)
	case *corpusv1.Command_AddDnsRecord:
		return a.addDNSRecord(c.AddDnsRecord)
	case *corpusv1.Command_DeleteDnsRecord:
		return a.deleteDNSRecord(c.DeleteDnsRecord)
	case *corpusv1.Command_DeleteVolume:
		return a.deleteVolume(c.DeleteVolume)
	case *corpusv1.Command_ReportVolumes:
		return a.reportVolumes(c.ReportVolumes)
	case *corpusv1.Command_ResizeVolume:
		return a.resizeVolume(c.ResizeVolume)
	case *corpusv1.Command_MoveVolume:
		return a.moveVolume(c.MoveVolume)
	case *corpusv1.Command_CreateUser:
		return a.createUser(c.CreateUser)
	case *corpusv1.Command_DeleteUser:
		return a.deleteUser(c.DeleteUser)
	case *corpusv1.Command_AddSshKey:
		return a.addSSHKey(c.AddSshKey)
	case *corpusv1.Command_DeleteSshKey:
		return a.deleteSSHKey(c.DeleteSshKey)
	case *corpusv1.Command_CreateProject:
		return a.createProject(c.CreateProject)
	case *corpusv1.Command_DeleteProject:
		return a.deleteProject(c.DeleteProject)
	case *corpusv1.Command_GrantProject:
		return a.grantProject(c.GrantProject)
	case *corpusv1.Command_BeginRelease:
		return a.beginRelease(c.BeginRelease)
	case *corpusv1.Command_FinishRelease:
		return a.finishRelease(c.FinishRelease)
	case *corpusv1.Command_SetCurrentRelease:
		return a.setCurrentRelease(c.SetCurrentRelease)
	case *corpusv1.Command_PruneReleases:
		return a.pruneReleases(c.PruneReleases)
	case *corpusv1.Command_SetManifestDomains:
		return a.setManifestDomains(c.SetManifestDomains)
	case *corpusv1.Command_UpsertCoordinator:
		return a.upsertCoordinator(c.UpsertCoordinator)
	case *corpusv1.Command_RemoveCoordinator:
		return a.removeCoordinator(c.RemoveCoordinator)
	case *corpusv1.Command_CreateUserToken:
		return a.createUserToken(c.CreateUserToken)
	case *corpusv1.Command_RevokeUserToken:
		return a.revokeUserToken(c.RevokeUserToken)
	case *corpusv1.Command_TouchUserTokens:
		return a.touchUserTokens(c.TouchUserTokens)
	case *corpusv1.Command_RemoveNode:
		return a.removeNode(c.RemoveNode)
	case *corpusv1.Command_PlaceGuests:
		return a.placeGuests(c.PlaceGuests)
	case *corpusv1.Command_SetNodeMode:
		return a.setNodeMode(c.SetNodeMode)
	case *corpusv1.Command_UserLogin:
		return a.userLogin(c.UserLogin)
	case *corpusv1.Command_SetConfig:
		return a.setConfig(c.SetConfig)
	case *corpusv1.Command_SetKeyring:
		return a.setKeyring(c.SetKeyring)
	case *corpusv1.Command_SetWebPort:
		return a.setWebPort(c.SetWebPort)
	case *corpusv1.Command_ScaleEnv:
		return a.scaleEnv(c.ScaleEnv)
	case *corpusv1.Command_SetInstanceRelease:
		return a.setInstanceRelease(c.SetInstanceRelease)
	case *corpusv1.Command_SetAutoscale:
		return a.setAutoscale(c.SetAutoscale)
	case *corpusv1.Command_SwitchEnv:
		return a.switchEnv(c.SwitchEnv)
	case *corpusv1.Command_PutExtension:
		return a.putExtension(c.PutExtension)
	case *corpusv1.Command_DeleteExtension:
		return a.deleteExtension(c.DeleteExtension)
	case *corpusv1.Command_PutRegistryLogin:
		return a.putRegistryLogin(c.PutRegistryLogin)
	case *corpusv1.Command_DeleteRegistryLogin:
		return a.deleteRegistryLogin(c.DeleteRegistryLogin)
	case *corpusv1.Command_CreateService:
		return a.createService(c.CreateService)
	case *corpusv1.Command_SetServiceDesired:
		return a.setServiceDesired(c.SetServiceDesired)
	case *corpusv1.Command_LinkService:
		return a.linkService(c.LinkService)
	case *corpusv1.Command_UnlinkService:
		return a.unlinkService(c.UnlinkService)
	case *corpusv1.Command_UpdateService:
		return a.updateService(c.UpdateService)
	case *corpusv1.Command_ReportServices:
		return a.reportServices(c.ReportServices)
	case *corpusv1.Command_BeginBackup:
		return a.beginBackup(c.BeginBackup)
	case *corpusv1.Command_FinishBackup:
		return a.finishBackup(c.FinishBackup)
	case *corpusv1.Command_DeleteBackup:
		return a.deleteBackup(c.DeleteBackup)
	case *corpusv1.Command_ReplaceServiceGuest:
		return a.replaceServiceGuest(c.ReplaceServiceGuest)
	case *corpusv1.Command_UpdateVolume:
		return a.updateVolume(c.UpdateVolume)
	case *corpusv1.Command_SetAcmeConfig:
		return a.setAcmeConfig(c.SetAcmeConfig)
	case *corpusv1.Command_PutCertificate:
		return a.putCertificate(c.PutCertificate)
	case *corpusv1.Command_DeleteCertificate:
		return a.deleteCertificate(c.DeleteCertificate)
	case *corpusv1.Command_SetRouteTls:
		return a.setRouteTLS(c.SetRouteTls)
	default:
		panic(fmt.Sprintf("state: command %T has no apply function", c))
	}
}

// view reads the state as this command sees it (its own writes included).
func (a *applier) view() *Snap {
	return statedb.View(a.txn)
}

func (a *applier) get(table, index, key string) any {
	raw, err := a.txn.First(table, index, key)
	if err != nil {
		panic(fmt.Sprintf("state: reading %s: %v", table, err))
	}
	return raw
}

func (a *applier) put(table string, obj any) {
	if err := a.txn.Insert(table, obj); err != nil {
		panic(fmt.Sprintf("state: writing %s: %v", table, err))
	}
}

func (a *applier) bootstrap(c *corpusv1.BootstrapCluster) error {
	if a.get(statedb.TableMeta, "id", statedb.MetaConfig) != nil {
		return fmt.Errorf("cluster config: %w", ErrExists)
	}
	if c.Config == nil || c.Config.ClusterId == "" {
		return fmt.Errorf("bootstrap without cluster id: %w", ErrInvalid)
	}
	a.put(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaConfig, Value: c.Config})
	return nil
}

func (a *applier) createToken(c *corpusv1.CreateJoinToken) error {
	if c.Token == nil || c.Token.Id == "" {
		return fmt.Errorf("join token without id: %w", ErrInvalid)
	}
	if a.get(statedb.TableTokens, "id", c.Token.Id) != nil {
		return fmt.Errorf("join token %s: %w", c.Token.Id, ErrExists)
	}
	a.put(statedb.TableTokens, c.Token)
	return nil
}

func (a *applier) enroll(c *corpusv1.EnrollNode) error {
	raw := a.get(statedb.TableTokens, "id", c.TokenId)
	if raw == nil {
		return ErrInvalidToken
	}
	tok := raw.(*corpusv1.JoinToken)
	if tok.UsedBy != "" || tok.SecretHash != c.TokenSecretHash || !a.now.AsTime().Before(tok.ExpiresAt.AsTime()) || tok.NodeId != "" {
		return ErrInvalidToken
	}
	n := c.Node
	if n == nil || n.Id == "" || n.Name == "" {
		return fmt.Errorf("node without id or name: %w", ErrInvalid)
	}
	if a.get(statedb.TableNodes, "name", n.Name) != nil {
		return fmt.Errorf("node %s: %w", n.Name, ErrExists)
	}
	if a.get(statedb.TableNodes, "id", n.Id) != nil {
		return fmt.Errorf("node id %s: %w", n.Id, ErrExists)
	}
	v := a.view()
	subnet, err := nextNodeSubnet(v.Config(), v.Nodes())
	if err != nil {
		return err
	}
	tok = proto.Clone(tok).(*corpusv1.JoinToken)
	tok.UsedBy = n.Id
	a.put(statedb.TableTokens, tok)
	n = proto.Clone(n).(*corpusv1.Node)
	n.GuestSubnet = subnet.String()
	n.EnrolledAt = a.now
	n.CreateIndex, n.ModifyIndex = a.index, a.index
	a.put(statedb.TableNodes, n)
	return nil
}

func (a *applier) node(id string) (*corpusv1.Node, error) {
	raw := a.get(statedb.TableNodes, "id", id)
	if raw == nil {
		return nil, fmt.Errorf("node %s: %w", id, ErrNotFound)
	}
	return proto.Clone(raw.(*corpusv1.Node)).(*corpusv1.Node), nil
}

func (a *applier) updateNode(c *corpusv1.UpdateNode) error {
	n, err := a.node(c.NodeId)
	if err != nil {
		return err
	}
	n.Capacity = c.Capacity
	n.Drivers = c.Drivers
	n.AgentAddress = c.AgentAddress
	n.AgentVersion = c.AgentVersion
	n.Address = c.Address
	n.MinHostPort = c.MinHostPort
	n.ReservedPorts = c.ReservedPorts
	n.GitPort = c.GitPort
	if c.Labels != nil {
		n.Labels = c.Labels
	}
	if n.Status != NodeReady {
		n.Status = NodeReady
		a.nodeReady(n.Id)
	}
	n.ModifyIndex = a.index
	a.put(statedb.TableNodes, n)
	a.giveIDRanges(n)
	return nil
}

func (a *applier) nodeIsDown(id string) bool {
	n, err := a.node(id)
	return err == nil && n.Status == NodeDown
}

func (a *applier) setNodeStatus(c *corpusv1.SetNodeStatus) error {
	n, err := a.node(c.NodeId)
	if err != nil {
		return err
	}
	if n.Status != c.Status {
		switch c.Status {
		case NodeDown:
			a.nodeDown(n.Id)
		case NodeReady:
			a.nodeReady(n.Id)
		}
	}
	n.Status = c.Status
	n.ModifyIndex = a.index
	a.put(statedb.TableNodes, n)
	return nil
}

func (a *applier) createGuest(c *corpusv1.CreateGuest) error {
	g := c.Guest
	if g == nil || g.Id == "" || g.Name == "" {
		return fmt.Errorf("guest without id or name: %w", ErrInvalid)
	}
	switch g.DesiredState {
	case DesiredRunning, DesiredStopped:
	default:
		// A guest born "deleted" (or with no state) would never be
		// placed, and deleting it would be a no-op: it could never go.
		return fmt.Errorf("creating guest in desired state %q: %w", g.DesiredState, ErrInvalid)
	}
	if a.get(statedb.TableGuests, "name", g.Name) != nil {
		return fmt.Errorf("guest %s: %w", g.Name, ErrExists)
	}
	if a.get(statedb.TableGuests, "id", g.Id) != nil {
		return fmt.Errorf("guest id %s: %w", g.Id, ErrExists)
	}
	g = proto.Clone(g).(*corpusv1.Guest)
	g.CreatedAt = a.now
	g.NodeId = ""
	g.Observed = nil
	g.Events = nil
	if err := a.bindVolume(g); err != nil {
		return err
	}
	a.event(g, "created", "desired state "+g.DesiredState)
	g.CreateIndex, g.ModifyIndex = a.index, a.index
	a.put(statedb.TableGuests, g)
	return nil
}

func (a *applier) guest(get func() any, what string) (*corpusv1.Guest, error) {
	raw := get()
	if raw == nil {
		return nil, fmt.Errorf("guest %s: %w", what, ErrNotFound)
	}
	return proto.Clone(raw.(*corpusv1.Guest)).(*corpusv1.Guest), nil
}

func (a *applier) setGuestDesired(c *corpusv1.SetGuestDesired) error {
	g, err := a.guest(func() any { return a.get(statedb.TableGuests, "name", c.Name) }, c.Name)
	if err != nil {
		return err
	}
	switch c.DesiredState {
	case DesiredRunning, DesiredStopped, DesiredDeleted:
	default:
		return fmt.Errorf("desired state %q: %w", c.DesiredState, ErrInvalid)
	}
	if g.DesiredState == DesiredDeleted && c.DesiredState != DesiredDeleted {
		return fmt.Errorf("guest %s is being deleted: %w", g.Name, ErrBadTransition)
	}
	if g.DesiredState == c.DesiredState && g.PurgeVolume == (c.PurgeVolume || g.PurgeVolume) {
		return nil
	}
	if c.DesiredState == DesiredDeleted {
		g.PurgeVolume = g.PurgeVolume || c.PurgeVolume
	}
	if c.DesiredState == DesiredDeleted && (g.NodeId == "" || a.nodeIsDown(g.NodeId)) {
		// Nobody can confirm the delete: the record goes now, and a down
		// node removes its copy when it returns (it is no longer desired).
		a.deleteGuest(g)
		return nil
	}
	g.DesiredState = c.DesiredState
	a.event(g, "desired", "desired state "+c.DesiredState)
	g.ModifyIndex = a.index
	a.put(statedb.TableGuests, g)
	return nil
}

// deleteGuest removes a guest and the routes pointing at it, and unbinds
// (or, purging, deletes) its volume.
func (a *applier) deleteGuest(g *corpusv1.Guest) {
	if _, err := a.txn.DeleteAll(statedb.TableRoutes, "guest", g.Id); err != nil {
		panic(fmt.Sprintf("state: deleting routes of guest: %v", err))
	}
	a.releaseVolume(g)
	if err := a.txn.Delete(statedb.TableGuests, g); err != nil {
		panic(fmt.Sprintf("state: deleting guest: %v", err))
	}
}

func (a *applier) placeGuest(c *corpusv1.PlaceGuest) error {
	g, err := a.guest(func() any { return a.get(statedb.TableGuests, "id", c.GuestId) }, c.GuestId)
	if err != nil {
		return err
	}
	if c.ModifyIndex != 0 && g.ModifyIndex != c.ModifyIndex {
		return fmt.Errorf("placing guest %s: %w", g.Name, ErrStale)
	}
	if g.NodeId != "" {
		return fmt.Errorf("guest %s is already placed: %w", g.Name, ErrBadTransition)
	}
	if c.NodeId == "" {
		if g.PendingReason == c.Reason {
			return nil
		}
		g.PendingReason = c.Reason
		a.event(g, "pending", c.Reason)
	} else {
		n, err := a.node(c.NodeId)
		if err != nil {
			return err
		}
		v := a.view()
		if why := fit.PortConflict(n, v.UsedPorts(n), g.GetSpec().GetPorts()); why != "" {
			return fmt.Errorf("placing guest %s on node %s: %s: %w", g.Name, n.Name, why, ErrPortTaken)
		}
		if err := a.assign(g, n, v); err != nil {
			return err
		}
		a.event(g, "placed", "placed on node "+n.Name)
	}
	g.ModifyIndex = a.index
	a.put(statedb.TableGuests, g)
	return nil
}

func (a *applier) reportGuests(c *corpusv1.ReportGuests) error {
	if _, err := a.node(c.NodeId); err != nil {
		return err
	}
	for _, r := range c.Guests {
		raw := a.get(statedb.TableGuests, "id", r.GuestId)
		if raw == nil || r.Observed == nil {
			continue // deleted meanwhile, or nothing said
		}
		g := raw.(*corpusv1.Guest)
		if g.NodeId != c.NodeId {
			continue // not this node's to report
		}
		if g.DesiredState == DesiredDeleted && r.Observed.State == ObservedDeleted {
			a.deleteGuest(g)
			continue
		}
		if corpusv1.SameObserved(g.Observed, r.Observed) {
			continue
		}
		g = proto.Clone(g).(*corpusv1.Guest)
		prev := g.GetObserved().GetState()
		g.Observed = proto.Clone(r.Observed).(*corpusv1.GuestObserved)
		g.Observed.UpdatedAt = a.now
		if prev != r.Observed.State || r.Observed.State == ObservedFailed {
			msg := r.Observed.State
			if r.Observed.Message != "" {
				msg += ": " + r.Observed.Message
			}
			a.event(g, "observed", msg)
		}
		a.migrated(g)
		g.ModifyIndex = a.index
		a.put(statedb.TableGuests, g)
	}
	return nil
}

func (a *applier) event(g *corpusv1.Guest, typ, msg string) {
	g.Events = append(g.Events, &corpusv1.Event{Time: a.now, Type: typ, Message: msg})
	if n := len(g.Events); n > maxEvents {
		g.Events = append([]*corpusv1.Event(nil), g.Events[n-maxEvents:]...)
	}
}

// Snapshot captures the state for Raft. The read transaction is a
// point-in-time view, so Apply can go on while Persist writes.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	snap := f.store.Read().Dump()
	snap.Version = CommandVersion
	snap.AppliedIndex = f.store.Applied()
	snap.AppliedTime = f.store.ClusterTime()
	return &fsmSnapshot{snap: snap}, nil
}

// Restore replaces the whole state with a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("reading snapshot: %w", err)
	}
	var snap corpusv1.Snapshot
	if err := proto.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("decoding snapshot: %w", err)
	}
	cv, err := checkSnapshot(&snap)
	if err != nil {
		f.refused = err
		return err
	}
	db, err := statedb.Load(&snap, cv)
	if err != nil {
		return err
	}
	f.store.Replace(db)
	f.store.SetApplied(max(snap.AppliedIndex, snap.Index))
	f.store.SetClusterTime(snap.AppliedTime)
	return nil
}

type fsmSnapshot struct {
	snap *corpusv1.Snapshot
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	data, err := proto.Marshal(s.snap)
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("writing snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// renewNodeCertificate makes a new certificate the node's current one;
// the one it replaces stays accepted until it expires.
func (a *applier) renewNodeCertificate(c *corpusv1.RenewNodeCertificate) error {
	n, err := a.node(c.NodeId)
	if err != nil {
		return err
	}
	if c.Serial == "" {
		return fmt.Errorf("certificate serial is empty: %w", ErrInvalid)
	}
	if c.Serial == n.CertSerial {
		return nil
	}
	n.PrevCertSerial, n.CertSerial, n.CertExpiresAt = n.CertSerial, c.Serial, c.ExpiresAt
	n.CertCaPin, n.TrustedCaPins = c.CaPin, c.TrustedCaPins
	n.ModifyIndex = a.index
	a.put(statedb.TableNodes, n)
	return nil
}

// removeNode forgets a node that holds nothing: no guest placed on it
// (deleting ones included), no volume on it or leaving it.
func (a *applier) removeNode(c *corpusv1.RemoveNode) error {
	n, err := a.node(c.NodeId)
	if err != nil {
		return err
	}
	v := a.view()
	if g := v.GuestsOnNode(n.Id); len(g) > 0 {
		return fmt.Errorf("node %s still has %d guests (%s, ...): drain it first (corpus node mode %s drain): %w", n.Name, len(g), g[0].Name, n.Name, ErrBadTransition)
	}
	if vols := append(v.VolumesOnNode(n.Id), v.VolumesLeftOnNode(n.Id)...); len(vols) > 0 {
		return fmt.Errorf("node %s still holds %d volumes (%s, ...): move or delete them first: %w", n.Name, len(vols), vols[0].Name, ErrBadTransition)
	}
	raw := a.get(statedb.TableNodes, "id", n.Id)
	if err := a.txn.Delete(statedb.TableNodes, raw); err != nil {
		panic(fmt.Sprintf("state: deleting node: %v", err))
	}
	return nil
}
