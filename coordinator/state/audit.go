package state

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// The audit log: every applied command leaves an entry saying who asked
// for what and how it ended, refused commands included. It is part of
// the replicated state, so every replica answers the same, and bounded.

// MaxAudit bounds the audit log; the oldest entries go first.
const MaxAudit = 10000

// ActorSystem is the actor of the control plane's own writes.
const ActorSystem = "system"

// audit records cmd, which changed nothing, in the audit log alone.
func (f *FSM) audit(index uint64, position uint32, cmd *corpusv1.Command, now *timestamppb.Timestamp, err error, last bool) {
	txn := f.store.Write()
	a := applier{txn: txn, index: index, now: now}
	a.put(statedb.TableAudit, auditEntry(cmd, index, position, err))
	if last && index%100 == 0 {
		a.trimAudit()
	}
	txn.Commit()
}

// auditEntry describes cmd, at position in the entry at index, applied
// with result err.
func auditEntry(cmd *corpusv1.Command, index uint64, position uint32, err error) *corpusv1.AuditEntry {
	e := &corpusv1.AuditEntry{Index: index, Position: position, Time: cmd.Now, Actor: cmd.Actor, Result: "ok"}
	if e.Actor == "" {
		e.Actor = ActorSystem
	}
	if err != nil {
		e.Result = err.Error()
	}
	m := cmd.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("cmd"))
	if fd == nil {
		e.Action = "unknown"
		return e
	}
	e.Action = string(fd.Name())
	e.Target = target(m.Get(fd).Message(), 2, targetFields)
	switch c := cmd.Cmd.(type) {
	case *corpusv1.Command_RecordAudit:
		e.Action, e.Target = c.RecordAudit.Action, c.RecordAudit.Target
		if err == nil && c.RecordAudit.Result != "" {
			e.Result = c.RecordAudit.Result
		}
	case *corpusv1.Command_GrantProject:
		if c.GrantProject.Revoke {
			e.Action = "revoke_project"
		}
	case *corpusv1.Command_SetConfig:
		// Keys only: the values are secrets.
		set := make([]string, 0, len(c.SetConfig.Set))
		for k := range c.SetConfig.Set {
			set = append(set, k)
		}
		sort.Strings(set)
		e.Target += " (" + ConfigChangeText(set, c.SetConfig.Unset) + ")"
	case *corpusv1.Command_ScaleEnv:
		e.Target += " (" + corpusv1.ScaleText(c.ScaleEnv.Scale) + ")"
		if c.ScaleEnv.Reason != "" {
			e.Target += ": " + c.ScaleEnv.Autoscaled + " " + c.ScaleEnv.Reason
		}
	case *corpusv1.Command_SetAutoscale:
		e.Target += " " + c.SetAutoscale.Process
	case *corpusv1.Command_SetInstanceRelease:
		e.Target += fmt.Sprintf(" instance %d -> %s", c.SetInstanceRelease.Instance, corpusv1.ReleaseName(c.SetInstanceRelease.Release))
	}
	return e
}

// AuditTarget names the object a request is about, as audit entries of
// writes do; failing that, the service or guest it names (a refused
// link, a backup's import, a shell: requests only, since what a write's
// entry says is the state machine's and cannot change).
func AuditTarget(m proto.Message) string {
	if m == nil {
		return ""
	}
	if t := target(m.ProtoReflect(), 2, targetFields); t != "" {
		return t
	}
	return target(m.ProtoReflect(), 2, []protoreflect.Name{"service", "guest"})
}

// targetFields are the fields that name a command's object, best first.
var targetFields = []protoreflect.Name{"name", "domain", "project", "user", "guest_id", "id", "node_id"}

// target finds the name of the object a command is about: a naming field
// (of fields, best first) of the command, or of a message inside it
// (depth levels down).
func target(m protoreflect.Message, depth int, fields []protoreflect.Name) string {
	fds := m.Descriptor().Fields()
	for _, n := range fields {
		if fd := fds.ByName(n); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			if v := m.Get(fd).String(); v != "" {
				if n == "project" {
					if env := fds.ByName("env"); env != nil && m.Get(env).String() != "" {
						return v + "/" + m.Get(env).String()
					}
				}
				return v
			}
		}
	}
	if depth == 0 {
		return ""
	}
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && m.Has(fd) {
			if t := target(m.Get(fd).Message(), depth-1, fields); t != "" {
				return t
			}
		}
	}
	return ""
}

// trimAudit drops the oldest entries beyond MaxAudit.
func (a *applier) trimAudit() {
	it, err := a.txn.Get(statedb.TableAudit, "id")
	if err != nil {
		panic(fmt.Sprintf("state: reading audit: %v", err))
	}
	var all []any
	for raw := it.Next(); raw != nil; raw = it.Next() {
		all = append(all, raw)
	}
	for i := 0; i < len(all)-MaxAudit; i++ {
		if err := a.txn.Delete(statedb.TableAudit, all[i]); err != nil {
			panic(fmt.Sprintf("state: trimming audit: %v", err))
		}
	}
}

// ConfigChangeText says what a config change does, keys only.
func ConfigChangeText(set, unset []string) string {
	var parts []string
	if len(set) > 0 {
		parts = append(parts, "set "+strings.Join(set, ", "))
	}
	if len(unset) > 0 {
		parts = append(parts, "unset "+strings.Join(unset, ", "))
	}
	return strings.Join(parts, "; ")
}
