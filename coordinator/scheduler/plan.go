package scheduler

import (
	"corpus/coordinator/fit"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Plan decides one scheduling pass over a snapshot of the state: a
// placement, or a new reason why there is none, for every guest that
// needs a node. Those are guests not placed yet, stateless guests of a
// node that is down (moved at once) and stateless guests of a draining
// node (a new copy is placed; the old one runs until it does). Guests
// with a volume stay where their data is. Each placement is counted
// against its node before the next guest is placed, so one pass never
// overfills a node; PlaceGuests checks every placement again when the
// plan is committed, and skips those the state no longer allows.
func Plan(view *state.Snap) []*corpusv1.PlaceGuest { return planUpTo(view, 0) }

// maxPlan bounds the placements (and new pending reasons) of one pass on
// the leader: a pass over tens of thousands of waiting guests would hold
// the leader's CPU for seconds and make one Raft entry of megabytes,
// followers would time out on it, and a new leader would start the
// whole pass again. The loop commits this many and runs the next pass
// at once.
const maxPlan = 1000

// planUpTo is Plan, stopping at limit entries when limit > 0; guests are
// taken in name order.
func planUpTo(view *state.Snap, limit int) []*corpusv1.PlaceGuest {
	nodes := view.Nodes()
	cands := make([]Candidate, len(nodes))
	byID := make(map[string]*Candidate, len(nodes))
	at := make(map[string]int, len(nodes))
	for i, n := range nodes {
		cands[i] = candidate(view, n, false)
		byID[n.Id], at[n.Id] = &cands[i], i
	}
	// The ports the nodes publish matter only to guests that publish
	// some: worked out when the pass meets the first.
	portsKnown := false
	projects := view.GuestProjects()
	load := zoneLoad(view, projects, byID)
	envLoad := map[state.ProjectRef]map[string]int{}
	envOf := func(ref state.ProjectRef) state.ProjectRef {
		return state.ProjectRef{Project: ref.Project, Env: ref.Env}
	}
	for id, ref := range projects {
		if g := view.Guest(id); g != nil && g.NodeId != "" && g.DesiredState != state.DesiredDeleted {
			if envLoad[envOf(ref)] == nil {
				envLoad[envOf(ref)] = map[string]int{}
			}
			envLoad[envOf(ref)][g.NodeId]++
		}
	}
	var plan []*corpusv1.PlaceGuest
	ks := &kinds{cands: cands, seen: map[string]*kind{}}
	for _, g := range view.Guests() {
		if limit > 0 && len(plan) >= limit {
			break
		}
		var from *Candidate
		if g.NodeId != "" {
			from = byID[g.NodeId]
			if !movable(view, g, from) {
				continue
			}
		}
		if g.DesiredState == state.DesiredDeleted {
			continue
		}
		if !portsKnown && len(g.GetSpec().GetPorts()) > 0 {
			for i := range cands {
				cands[i].UsedPorts = view.UsedPorts(cands[i].Node)
			}
			portsKnown = true
		}
		ref := projects[g.Id]
		ask := Ask{Guest: g, Env: ref.Env, ZoneLoad: load[ref.Project], NodeLoad: envLoad[envOf(ref)]}
		if from != nil && ref.Project != "" {
			ask.ZoneLoad = without(ask.ZoneLoad, zoneOf(from.Node))
		}
		var d Decision
		if v := view.VolumeOfGuest(g.Id); v == nil || v.NodeId == "" {
			d = place(ask, cands, ks.of(g.GetSpec(), ask.Env))
		} else if c := byID[v.NodeId]; c != nil {
			// A volume that lives on a node keeps its guest there.
			d = Place(ask, []Candidate{*c})
		} else {
			d = Decision{Reason: "its volume is on a node that is no longer enrolled"}
		}
		if d.NodeID == "" {
			// Reasons are kept for guests without a running node; a
			// draining node's guest runs on while it waits.
			down := from == nil || from.Node.Status == state.NodeDown
			if down && d.Reason != g.PendingReason {
				plan = append(plan, &corpusv1.PlaceGuest{GuestId: g.Id, Reason: d.Reason, ModifyIndex: g.ModifyIndex})
			}
			continue
		}
		plan = append(plan, &corpusv1.PlaceGuest{GuestId: g.Id, NodeId: d.NodeID, ModifyIndex: g.ModifyIndex})
		c := byID[d.NodeID]
		moved := ks.moving(at[d.NodeID])
		c.placed(g)
		moved()
		if ports := g.GetSpec().GetPorts(); len(ports) > 0 {
			used := make(map[int32]string, len(c.UsedPorts)+len(ports))
			for p, owner := range c.UsedPorts {
				used[p] = owner
			}
			for _, p := range ports {
				used[p.HostPort] = "guest " + g.Name + " (nat)"
			}
			c.UsedPorts = used
		}
		if ref.Project != "" {
			if envLoad[envOf(ref)] == nil {
				envLoad[envOf(ref)] = map[string]int{}
			}
			envLoad[envOf(ref)][d.NodeID]++
			if load[ref.Project] == nil {
				load[ref.Project] = map[string]int{}
			}
			load[ref.Project][zoneOf(c.Node)]++
		}
	}
	return plan
}

// movable reports whether a placed guest needs another node: it is
// stateless and its node is gone, down, or draining (and it is not
// already migrating).
func movable(view *state.Snap, g *corpusv1.Guest, from *Candidate) bool {
	switch {
	case g.DesiredState == state.DesiredDeleted:
		return false
	case from != nil && from.Node.Status != state.NodeDown &&
		(from.Node.Mode != state.ModeDrain || g.PreviousNodeId != ""):
		return false
	}
	return view.Stateless(g)
}

// zoneLoad counts the placed guests of each project by zone.
func zoneLoad(view *state.Snap, projects map[string]state.ProjectRef, byID map[string]*Candidate) map[string]map[string]int {
	load := map[string]map[string]int{}
	for id, ref := range projects {
		g := view.Guest(id)
		c := byID[g.GetNodeId()]
		if c == nil || g.DesiredState == state.DesiredDeleted {
			continue
		}
		if load[ref.Project] == nil {
			load[ref.Project] = map[string]int{}
		}
		load[ref.Project][zoneOf(c.Node)]++
	}
	return load
}

func zoneOf(n *corpusv1.Node) string { return n.GetLabels()[fit.LabelZone] }

// without returns load with one guest fewer in zone (the guest being
// placed again), leaving load unchanged.
func without(load map[string]int, zone string) map[string]int {
	if load[zone] == 0 {
		return load
	}
	out := make(map[string]int, len(load))
	for z, n := range load {
		out[z] = n
	}
	out[zone]--
	return out
}

// Explain decides for one guest on the state as it is, outside a pass:
// where it would go now, or why it cannot. The API uses it to say why a
// guest waits.
func Explain(view *state.Snap, g *corpusv1.Guest) Decision {
	nodes := view.Nodes()
	cands := make([]Candidate, 0, len(nodes))
	for _, n := range nodes {
		if n.Id != g.NodeId {
			cands = append(cands, candidate(view, n, true))
		}
	}
	projects := view.GuestProjects()
	ref := projects[g.Id]
	return Place(Ask{Guest: g, Env: ref.Env}, cands)
}

// Room says how many of k more guests like g (for project environment
// env, "" outside projects) the nodes can take now, placed one after
// another, and why the next one could not be placed ("" when all fit).
// The autoscaler asks it before scaling out, so a scale-out that cannot
// be placed is capped and said so instead of leaving guests pending.
func Room(view *state.Snap, g *corpusv1.Guest, env string, k int) (int, string) {
	nodes := view.Nodes()
	cands := make([]Candidate, len(nodes))
	for i, n := range nodes {
		cands[i] = candidate(view, n, true)
	}
	for i := range k {
		d := Place(Ask{Guest: g, Env: env}, cands)
		if d.NodeID == "" {
			return i, d.Reason
		}
		for j := range cands {
			if cands[j].Node.Id == d.NodeID {
				cands[j].placed(g)
			}
		}
	}
	return k, ""
}
