package statedb

import (
	"sort"

	corpusv1 "corpus/proto/corpus/v1"
)

// User returns the user with that name, or nil.
func (v *Snap) User(name string) *corpusv1.User {
	return first[*corpusv1.User](v, TableUsers, "id", name)
}

// Users returns every user sorted by name.
func (v *Snap) Users() []*corpusv1.User {
	return all[*corpusv1.User](v, TableUsers, "id")
}

// UserByFingerprint returns the user owning an SSH key, or nil.
func (v *Snap) UserByFingerprint(fp string) *corpusv1.User {
	for _, u := range v.Users() {
		for _, k := range u.Keys {
			if k.Fingerprint == fp {
				return u
			}
		}
	}
	return nil
}

// Project returns the project with that name, or nil.
func (v *Snap) Project(name string) *corpusv1.Project {
	return first[*corpusv1.Project](v, TableProjects, "name", name)
}

// ProjectOfGuest returns the project and environment a guest runs, nil
// when it runs none.
func (v *Snap) ProjectOfGuest(guestID string) (*corpusv1.Project, *corpusv1.ProjectEnv) {
	for _, p := range v.Projects() {
		for _, e := range p.GetEnvs() {
			for _, in := range Instances(e) {
				if in.GuestID == guestID {
					return p, e
				}
			}
		}
	}
	return nil, nil
}

// Projects returns every project sorted by name.
func (v *Snap) Projects() []*corpusv1.Project {
	return all[*corpusv1.Project](v, TableProjects, "name")
}

// Releases returns an environment's releases, newest first.
func (v *Snap) Releases(project, env string) []*corpusv1.Release {
	out := all[*corpusv1.Release](v, TableReleases, "env", project, env)
	sort.Slice(out, func(i, j int) bool { return out[i].Number > out[j].Number })
	return out
}

// ReleaseByNumber returns one release of an environment, or nil.
func (v *Snap) ReleaseByNumber(project, env string, n uint32) *corpusv1.Release {
	for _, r := range v.Releases(project, env) {
		if r.Number == n {
			return r
		}
	}
	return nil
}

// Release returns the release with that id, or nil.
func (v *Snap) Release(id string) *corpusv1.Release {
	return first[*corpusv1.Release](v, TableReleases, "id", id)
}

// AllReleases returns every release (for snapshots and keyring
// rotations).
func (v *Snap) AllReleases() []*corpusv1.Release {
	return all[*corpusv1.Release](v, TableReleases, "id")
}
