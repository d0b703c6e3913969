package statedb

import (
	"slices"
	"sort"

	corpusv1 "corpus/proto/corpus/v1"
)

// Service returns the service with that name, or nil.
func (v *Snap) Service(name string) *corpusv1.Service {
	return first[*corpusv1.Service](v, TableServices, "name", name)
}

// ServiceByID returns the service with that id, or nil.
func (v *Snap) ServiceByID(id string) *corpusv1.Service {
	return first[*corpusv1.Service](v, TableServices, "id", id)
}

// ServiceOfGuest returns the service a guest runs, or nil.
func (v *Snap) ServiceOfGuest(guestID string) *corpusv1.Service {
	if guestID == "" {
		return nil
	}
	return first[*corpusv1.Service](v, TableServices, "guest", guestID)
}

// Services returns every service sorted by name.
func (v *Snap) Services() []*corpusv1.Service {
	return all[*corpusv1.Service](v, TableServices, "name")
}

// LinksOf returns the services linked to a project environment.
func (v *Snap) LinksOf(project, env string) []*corpusv1.Service {
	var out []*corpusv1.Service
	for _, s := range v.Services() {
		if LinkIndex(s, project, env) >= 0 {
			out = append(out, s)
		}
	}
	return out
}

// Backup returns the backup with that id, or nil.
func (v *Snap) Backup(id string) *corpusv1.Backup {
	return first[*corpusv1.Backup](v, TableBackups, "id", id)
}

// Backups returns a service's backups (every backup when service is
// empty), newest first.
func (v *Snap) Backups(service string) []*corpusv1.Backup {
	var out []*corpusv1.Backup
	if service == "" {
		out = all[*corpusv1.Backup](v, TableBackups, "id")
	} else {
		out = all[*corpusv1.Backup](v, TableBackups, "service", service)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	return out
}

// VolumeBackups returns a volume's backups, newest first.
func (v *Snap) VolumeBackups(volume string) []*corpusv1.Backup {
	out := all[*corpusv1.Backup](v, TableBackups, "volume", volume)
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	return out
}

// BackupsOnNode returns the backups a node holds.
func (v *Snap) BackupsOnNode(nodeID string) []*corpusv1.Backup {
	return all[*corpusv1.Backup](v, TableBackups, "node", nodeID)
}

// LinkIndex is the index of service s's link to a project environment
// in s.Links, or -1.
func LinkIndex(s *corpusv1.Service, project, env string) int {
	return slices.IndexFunc(s.Links, func(l *corpusv1.ServiceLink) bool { return l.Project == project && l.Env == env })
}
