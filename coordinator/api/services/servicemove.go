package services

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// A lost service is one whose guest's node is down or gone, its data with
// it. A restore brings it back on another node from a backup kept
// elsewhere: a new guest and volume there (one state change), the
// template installed and healthy, the backup loaded, and the links
// pointed at the new address (a release of each linked environment). The
// old volume stays on the dead node, unbound: it may hold newer data than
// the backup, so only an op deletes it.

// serviceReadyTimeout bounds the wait for a new service guest to be
// healthy (its node may first build the template's image).
const serviceReadyTimeout = 20 * time.Minute

// serviceLost says whether a service's guest is on a node that is down
// or no longer enrolled.
func serviceLost(view *state.Snap, svc *corpusv1.Service) bool {
	g := view.Guest(svc.GuestId)
	if g == nil || g.NodeId == "" {
		return false
	}
	n := view.Node(g.NodeId)
	return n == nil || n.Status == state.NodeDown
}

// replacementName is the first free guest (and volume) name for a
// service's new guest: svc-NAME-2, -3, ...
func replacementName(view *state.Snap, service string) (string, error) {
	for i := 2; ; i++ {
		name := fmt.Sprintf("%s-%d", corpusv1.ServiceGuestName(service), i)
		if err := names.Validate("guest", name); err != nil {
			return "", api.Invalidf("service %s: no guest name left for a replacement: %v", service, err)
		}
		if view.GuestByName(name) == nil && view.Volume(name) == nil {
			return name, nil
		}
	}
}

// moveLost gives a lost service a new guest and volume (on toNode when
// given, else where the scheduler places it) and waits until it is
// healthy, empty. It returns the service as it then is.
func (s *serviceService) moveLost(ctx context.Context, view *state.Snap, svc *corpusv1.Service, toNode string, progress func(*corpusv1.BackupProgress) error) (*corpusv1.Service, error) {
	old := view.Guest(svc.GuestId)
	oldNode := view.Node(old.NodeId).GetName()
	if oldNode == "" {
		oldNode = "(no longer enrolled)"
	}
	var nodeID string
	if toNode != "" {
		n := api.FindNode(view, toNode)
		switch {
		case n == nil:
			return nil, api.ToConnect(api.NotFound("node", toNode, "corpus node list"))
		case n.Id == old.NodeId:
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s is the lost one", n.Name))
		case n.Status != state.NodeReady:
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s is %s", n.Name, n.Status))
		}
		nodeID = n.Id
	}
	name, err := replacementName(view, svc.Name)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	spec := proto.Clone(old.Spec).(*corpusv1.GuestSpec)
	size := spec.GetVolume().GetSizeBytes()
	if v := view.VolumeOfGuest(old.Id); v != nil {
		size = v.SizeBytes
	}
	spec.Volume = &corpusv1.VolumeSpec{SizeBytes: size, Path: spec.GetVolume().GetPath()}
	g := &corpusv1.Guest{Id: secret.Hex(8), Name: name, Spec: spec, DesiredState: state.DesiredRunning}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ReplaceServiceGuest{ReplaceServiceGuest: &corpusv1.ReplaceServiceGuest{
		Service: svc.Name, OldGuestId: old.Id, Guest: g, NodeId: nodeID,
	}}}); err != nil {
		return nil, err
	}
	oldVolume := view.VolumeOfGuest(old.Id).GetName()
	msg := fmt.Sprintf("service %s is lost with node %s: a new guest %s with an empty volume takes its place", svc.Name, oldNode, name)
	if oldVolume != "" {
		msg += fmt.Sprintf("; the old data stays on node %s as volume %s (unbound) until you delete it", oldNode, oldVolume)
	}
	if err := progress(&corpusv1.BackupProgress{Phase: "moving", Message: msg}); err != nil {
		return nil, err
	}
	if err := s.waitHealthy(ctx, svc.Name, g.Id, progress); err != nil {
		return nil, err
	}
	return s.b.Store.Read().Service(svc.Name), nil
}

// waitHealthy waits until a service runs in guest guestID and passes its
// health check, saying what changes meanwhile.
func (s *serviceService) waitHealthy(ctx context.Context, service, guestID string, progress func(*corpusv1.BackupProgress) error) error {
	wctx, cancel := context.WithTimeout(ctx, serviceReadyTimeout)
	defer cancel()
	var last string
	for {
		view := s.b.Store.Read()
		view.WatchIndex()
		svc := view.Service(service)
		if svc == nil || svc.GuestId != guestID {
			return connect.NewError(connect.CodeAborted, fmt.Errorf("service %s changed meanwhile (corpus service show %s)", service, service))
		}
		g := view.Guest(guestID)
		say := fmt.Sprintf("guest %s: %s", g.Name, api.GuestStatus(view, g))
		if n := view.Node(g.NodeId); n != nil {
			say += " on node " + n.Name
		} else if g.PendingReason != "" {
			say += " (" + g.PendingReason + ")"
		}
		if o := svc.Observed; o != nil {
			say += "; service " + o.State
			if o.Message != "" {
				say += ": " + o.Message
			}
		}
		if say != last {
			if err := progress(&corpusv1.BackupProgress{Phase: "moving", Message: say}); err != nil {
				return err
			}
			last = say
		}
		if svc.Observed.GetState() == corpusv1.ServiceHealthy {
			return nil
		}
		if err := view.Wait(wctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("service %s is not healthy after %s (%s); once `corpus service show %s` says healthy, restore it again", service, serviceReadyTimeout, say, service))
		}
	}
}

// refreshLinks points the links of a service at where it runs now: an
// environment whose variables say otherwise gets them anew, and a
// release with them.
func (s *serviceService) refreshLinks(ctx context.Context, service string, progress func(*corpusv1.BackupProgress) error) error {
	view := s.b.Store.Read()
	svc := view.Service(service)
	if svc == nil {
		return nil
	}
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return api.ToConnect(err)
	}
	send := func(o *corpusv1.DeployOutput) error {
		if len(o.Output) == 0 {
			return nil
		}
		return progress(&corpusv1.BackupProgress{Phase: "relinking", Message: strings.TrimRight(string(o.Output), "\n")})
	}
	for _, l := range svc.Links {
		e := corpusv1.EnvNamed(view.Project(l.Project), l.Env)
		if e == nil {
			continue
		}
		want, err := s.LinkEnv(view, svc, l.As)
		if err != nil {
			return err
		}
		have, err := keyring.OpenConfig(k, l.Project, l.Env, e.Config)
		if err != nil {
			return api.ToConnect(err)
		}
		if maps.Equal(want, filterKeys(have, want)) {
			continue
		}
		if err := s.WriteLink(ctx, svc.Name, l.Project, l.Env, l.As, want); err != nil {
			return err
		}
		what := fmt.Sprintf("service %s now runs at %s", svc.Name, view.Guest(svc.GuestId).GetAddress())
		if err := s.b.Releases.ReleaseConfig(ctx, l.Project, l.Env, what, false, send); err != nil {
			return fmt.Errorf("releasing %s/%s with the new address of %s: %w", l.Project, l.Env, svc.Name, err)
		}
	}
	return nil
}

// filterKeys is m with only the keys of like.
func filterKeys(m, like map[string]string) map[string]string {
	out := make(map[string]string, len(like))
	for k := range like {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}
