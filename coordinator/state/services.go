package state

import (
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// Services and their backups. A service made from a template runs in a
// guest of its own, created with it in one step; an external one is only
// its endpoint and secrets. Links give project environments the
// service's variables as config, in the same step as the link is
// recorded, so a link and its config never disagree.

// ServicePlace is where a service's secret KEY is sealed.
func ServicePlace(service, key string) string { return "service/" + service + "/" + key }

func (a *applier) service(name string) (*corpusv1.Service, error) {
	raw := a.get(statedb.TableServices, "name", name)
	if raw == nil {
		return nil, fmt.Errorf("service %s: %w", name, ErrNotFound)
	}
	return proto.Clone(raw.(*corpusv1.Service)).(*corpusv1.Service), nil
}

func (a *applier) putService(s *corpusv1.Service) {
	s.ModifyIndex = a.index
	a.put(statedb.TableServices, s)
}

// checkSealed checks that every value is sealed with the keyring's
// primary key.
func (a *applier) checkSealed(what string, values map[string][]byte) error {
	kr := a.view().Keyring()
	for k, v := range values {
		id, err := seal.KeyID(v)
		if err != nil || kr == nil || id != kr.Primary {
			return fmt.Errorf("%s %s is not sealed with the keyring's primary key: %w", what, k, ErrStale)
		}
	}
	return nil
}

func (a *applier) createService(c *corpusv1.CreateService) error {
	s := c.Service
	if s == nil || s.Id == "" || s.Name == "" {
		return fmt.Errorf("service without id or name: %w", ErrInvalid)
	}
	if a.get(statedb.TableServices, "name", s.Name) != nil {
		return fmt.Errorf("service %s: %w", s.Name, ErrExists)
	}
	switch {
	case s.ExternalUrl == "" && (c.Guest == nil || s.TemplateSpec == nil):
		return fmt.Errorf("service %s has neither a template and a guest nor an endpoint: %w", s.Name, ErrInvalid)
	case s.ExternalUrl != "" && c.Guest != nil:
		return fmt.Errorf("external service %s with a guest: %w", s.Name, ErrInvalid)
	}
	if err := a.checkSealed("secret", s.Secrets); err != nil {
		return err
	}
	s = proto.Clone(s).(*corpusv1.Service)
	if c.Guest != nil {
		if err := a.createGuest(&corpusv1.CreateGuest{Guest: c.Guest}); err != nil {
			return err
		}
		s.GuestId, s.GuestName = c.Guest.Id, c.Guest.Name
	}
	if s.DesiredState == "" {
		s.DesiredState = DesiredRunning
	}
	s.Links = nil
	s.Observed = nil
	s.CreatedAt = a.now
	s.CreateIndex = a.index
	a.putService(s)
	return nil
}

// setServiceDesired starts, stops or deletes a service through its guest.
func (a *applier) setServiceDesired(c *corpusv1.SetServiceDesired) error {
	s, err := a.service(c.Name)
	if err != nil {
		return err
	}
	switch c.DesiredState {
	case DesiredRunning, DesiredStopped, DesiredDeleted:
	default:
		return fmt.Errorf("desired state %q: %w", c.DesiredState, ErrInvalid)
	}
	if c.DesiredState == DesiredDeleted && len(s.Links) > 0 {
		l := s.Links[0]
		return fmt.Errorf("service %s is linked to %s/%s (and %d more): unlink it first: %w", s.Name, l.Project, l.Env, len(s.Links)-1, ErrBadTransition)
	}
	if s.GuestId == "" && c.DesiredState != DesiredDeleted {
		return fmt.Errorf("external service %s has no guest to start or stop: %w", s.Name, ErrInvalid)
	}
	if g, _ := a.get(statedb.TableGuests, "id", s.GuestId).(*corpusv1.Guest); g != nil && g.DesiredState != DesiredDeleted {
		if err := a.setGuestDesired(&corpusv1.SetGuestDesired{Name: g.Name, DesiredState: c.DesiredState, PurgeVolume: c.Purge}); err != nil {
			return err
		}
	}
	if c.DesiredState != DesiredDeleted {
		s.DesiredState = c.DesiredState
		a.putService(s)
		return nil
	}
	if c.Purge {
		if _, err := a.txn.DeleteAll(statedb.TableBackups, "service", s.Name); err != nil {
			panic(fmt.Sprintf("state: deleting backups: %v", err))
		}
	}
	if err := a.txn.Delete(statedb.TableServices, s); err != nil {
		panic(fmt.Sprintf("state: deleting service: %v", err))
	}
	return nil
}

// replaceServiceGuest gives a lost service a new guest (and volume) in
// place of the one on a node that is down or gone.
func (a *applier) replaceServiceGuest(c *corpusv1.ReplaceServiceGuest) error {
	s, err := a.service(c.Service)
	if err != nil {
		return err
	}
	if s.GuestId == "" {
		return fmt.Errorf("external service %s has no guest: %w", s.Name, ErrInvalid)
	}
	if c.OldGuestId != s.GuestId {
		return fmt.Errorf("service %s runs in another guest now: %w", s.Name, ErrStale)
	}
	if c.Guest == nil || c.Guest.GetSpec().GetVolume().GetSizeBytes() == 0 || c.Guest.GetSpec().GetVolume().GetUseVolume() != "" {
		return fmt.Errorf("a replacement guest needs a new volume: %w", ErrInvalid)
	}
	if old, _ := a.get(statedb.TableGuests, "id", s.GuestId).(*corpusv1.Guest); old != nil {
		if old.NodeId != "" && !a.nodeIsDown(old.NodeId) && a.get(statedb.TableNodes, "id", old.NodeId) != nil {
			return fmt.Errorf("service %s runs on a node that is not down: restore it in place: %w", s.Name, ErrBadTransition)
		}
		a.deleteGuest(proto.Clone(old).(*corpusv1.Guest))
	}
	if err := a.createGuest(&corpusv1.CreateGuest{Guest: c.Guest}); err != nil {
		return err
	}
	if c.NodeId != "" {
		b := &placeBatch{alloc: map[string]*corpusv1.Resources{}, ports: map[string]map[int32]string{}}
		if err := a.placeChecked(&corpusv1.PlaceGuest{GuestId: c.Guest.Id, NodeId: c.NodeId}, b); err != nil {
			return err
		}
	}
	s.GuestId, s.GuestName = c.Guest.Id, c.Guest.Name
	s.Observed = nil
	a.putService(s)
	return nil
}

// linkService records a link and sets its config keys in the project
// environment; a link of the same environment is replaced.
func (a *applier) linkService(c *corpusv1.LinkService) error {
	s, err := a.service(c.Service)
	if err != nil {
		return err
	}
	l := c.Link
	if l == nil || l.Project == "" || l.Env == "" || l.As == "" || len(c.Config) == 0 {
		return fmt.Errorf("link without project, environment, name or variables: %w", ErrInvalid)
	}
	p, err := a.project(l.Project)
	if err != nil {
		return err
	}
	env := corpusv1.EnvNamed(p, l.Env)
	if env == nil {
		return fmt.Errorf("environment %s of project %s: %w", l.Env, l.Project, ErrNotFound)
	}
	if err := a.checkSealed("config", c.Config); err != nil {
		return err
	}
	// Keys another link (or the user) set are not taken over.
	var old []string
	if i := statedb.LinkIndex(s, l.Project, l.Env); i >= 0 {
		old = s.Links[i].Keys
	}
	for k := range c.Config {
		if _, set := env.Config[k]; set && !slices.Contains(old, k) {
			if owner := a.linkOwning(l.Project, l.Env, k); owner != "" {
				return fmt.Errorf("%s is set in %s/%s by the link of service %s; link with another --as: %w", k, l.Project, l.Env, owner, ErrExists)
			}
			return fmt.Errorf("%s is set in %s/%s already; unset it or link with another --as: %w", k, l.Project, l.Env, ErrExists)
		}
	}
	var unset []string
	for _, k := range old {
		if _, keep := c.Config[k]; !keep {
			if _, set := env.Config[k]; set {
				unset = append(unset, k)
			}
		}
	}
	if err := a.setConfig(&corpusv1.SetConfig{Project: l.Project, Env: l.Env, Set: c.Config, Unset: unset}); err != nil {
		return err
	}
	l = proto.Clone(l).(*corpusv1.ServiceLink)
	l.Keys = sortedKeys(c.Config)
	l.CreatedAt = a.now
	if i := statedb.LinkIndex(s, l.Project, l.Env); i >= 0 {
		s.Links[i] = l
	} else {
		s.Links = append(s.Links, l)
	}
	sort.Slice(s.Links, func(i, j int) bool {
		if s.Links[i].Project != s.Links[j].Project {
			return s.Links[i].Project < s.Links[j].Project
		}
		return envOrder(s.Links[i].Env) < envOrder(s.Links[j].Env)
	})
	a.putService(s)
	return nil
}

// linkOwning names the service whose link set config key in an
// environment, "" when none did.
func (a *applier) linkOwning(project, env, key string) string {
	for _, s := range a.view().Services() {
		if i := statedb.LinkIndex(s, project, env); i >= 0 && slices.Contains(s.Links[i].Keys, key) {
			return s.Name
		}
	}
	return ""
}

// unlinkService removes a link and the config keys it set that are still
// there.
func (a *applier) unlinkService(c *corpusv1.UnlinkService) error {
	s, err := a.service(c.Service)
	if err != nil {
		return err
	}
	i := statedb.LinkIndex(s, c.Project, c.Env)
	if i < 0 {
		return fmt.Errorf("service %s is not linked to %s/%s: %w", s.Name, c.Project, c.Env, ErrNotFound)
	}
	if p, err := a.project(c.Project); err == nil {
		if env := corpusv1.EnvNamed(p, c.Env); env != nil {
			var unset []string
			for _, k := range s.Links[i].Keys {
				if _, set := env.Config[k]; set {
					unset = append(unset, k)
				}
			}
			if len(unset) > 0 {
				if err := a.setConfig(&corpusv1.SetConfig{Project: c.Project, Env: c.Env, Unset: unset}); err != nil {
					return err
				}
			}
		}
	}
	s.Links = slices.Delete(s.Links, i, i+1)
	a.putService(s)
	return nil
}

// dropLinks forgets the links to a project's environment (all of them
// when env is empty): what deleting it does.
func (a *applier) dropLinks(project, env string) {
	for _, s := range a.view().Services() {
		keep := slices.DeleteFunc(slices.Clone(s.Links), func(l *corpusv1.ServiceLink) bool {
			return l.Project == project && (env == "" || l.Env == env)
		})
		if len(keep) != len(s.Links) {
			s = proto.Clone(s).(*corpusv1.Service)
			s.Links = keep
			a.putService(s)
		}
	}
}

// ValidSchedule checks a backup schedule.
func ValidSchedule(s string) error {
	switch s {
	case "", corpusv1.ScheduleHourly, corpusv1.ScheduleDaily, corpusv1.ScheduleWeekly:
		return nil
	}
	return fmt.Errorf("backup schedule %q: use hourly, daily or weekly: %w", s, ErrInvalid)
}

func (a *applier) updateService(c *corpusv1.UpdateService) error {
	s, err := a.service(c.Name)
	if err != nil {
		return err
	}
	if err := ValidSchedule(c.BackupSchedule); err != nil {
		return err
	}
	if c.BackupSchedule != "" && s.GuestId == "" {
		return fmt.Errorf("external service %s has no data to back up: %w", s.Name, ErrInvalid)
	}
	s.BackupSchedule, s.BackupKeep = c.BackupSchedule, c.BackupKeep
	a.putService(s)
	return nil
}

// reportServices records how a node's agent found the services whose
// guests it runs; a report of a service elsewhere is ignored.
func (a *applier) reportServices(c *corpusv1.ReportServices) error {
	for _, r := range c.Services {
		raw := a.get(statedb.TableServices, "id", r.ServiceId)
		if raw == nil || r.Observed == nil {
			continue
		}
		s := raw.(*corpusv1.Service)
		g, _ := a.get(statedb.TableGuests, "id", s.GuestId).(*corpusv1.Guest)
		if g == nil || g.NodeId != c.NodeId {
			continue
		}
		if s.Observed.GetState() == r.Observed.State && s.Observed.GetMessage() == r.Observed.Message {
			continue
		}
		s = proto.Clone(s).(*corpusv1.Service)
		s.Observed = proto.Clone(r.Observed).(*corpusv1.ServiceObserved)
		s.Observed.Since = a.now
		a.putService(s)
	}
	return nil
}

func (a *applier) beginBackup(c *corpusv1.BeginBackup) error {
	b := c.Backup
	if b == nil || b.Id == "" || (b.Service == "") == (b.Volume == "") || b.NodeId == "" {
		return fmt.Errorf("backup without id or node, or not of one service or one volume: %w", ErrInvalid)
	}
	if a.get(statedb.TableBackups, "id", b.Id) != nil {
		return fmt.Errorf("backup %s: %w", b.Id, ErrExists)
	}
	if b.Service != "" {
		if _, err := a.service(b.Service); err != nil {
			return err
		}
	} else if a.volume("name", b.Volume) == nil {
		return fmt.Errorf("volume %s: %w", b.Volume, ErrNotFound)
	}
	if a.get(statedb.TableNodes, "id", b.NodeId) == nil {
		return fmt.Errorf("node %s: %w", b.NodeId, ErrNotFound)
	}
	b = proto.Clone(b).(*corpusv1.Backup)
	b.Status = corpusv1.BackupRunning
	b.StartedAt = a.now
	b.CreateIndex, b.ModifyIndex = a.index, a.index
	a.put(statedb.TableBackups, b)
	return nil
}

func (a *applier) finishBackup(c *corpusv1.FinishBackup) error {
	raw := a.get(statedb.TableBackups, "id", c.Id)
	if raw == nil {
		return fmt.Errorf("backup %s: %w", c.Id, ErrNotFound)
	}
	b := proto.Clone(raw.(*corpusv1.Backup)).(*corpusv1.Backup)
	switch c.Status {
	case corpusv1.BackupSucceeded:
		if len(c.Sha256) != 64 || c.SizeBytes < 0 {
			return fmt.Errorf("a finished backup without its checksum: %w", ErrInvalid)
		}
	case corpusv1.BackupFailed:
	default:
		return fmt.Errorf("backup status %q: %w", c.Status, ErrInvalid)
	}
	if b.Status != corpusv1.BackupRunning {
		return fmt.Errorf("backup %s is %s already: %w", b.Id, b.Status, ErrBadTransition)
	}
	b.Status, b.SizeBytes, b.Sha256, b.Message = c.Status, c.SizeBytes, c.Sha256, c.Message
	b.FinishedAt = a.now
	b.ModifyIndex = a.index
	a.put(statedb.TableBackups, b)
	return nil
}

func (a *applier) deleteBackup(c *corpusv1.DeleteBackup) error {
	raw := a.get(statedb.TableBackups, "id", c.Id)
	if raw == nil {
		return fmt.Errorf("backup %s: %w", c.Id, ErrNotFound)
	}
	if err := a.txn.Delete(statedb.TableBackups, raw); err != nil {
		panic(fmt.Sprintf("state: deleting backup: %v", err))
	}
	return nil
}
