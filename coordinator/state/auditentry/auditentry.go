// Package auditentry says what a command or a request is about, as the
// audit log records it: its action, the object it names and, for config
// changes, the keys it sets (never the values: they are secrets). It is
// the state machine's description of what it applied, and the API's of
// what it refused.
package auditentry

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	corpusv1 "corpus/proto/corpus/v1"
)

// ActorSystem is the actor of the control plane's own writes.
const ActorSystem = "system"

// Of describes cmd, at position in the entry at index, applied with
// result err.
func Of(cmd *corpusv1.Command, index uint64, position uint32, err error) *corpusv1.AuditEntry {
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
		e.Target += " (" + ConfigChange(set, c.SetConfig.Unset) + ")"
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

// Target names the object a request is about, as audit entries of
// writes do; failing that, the service or guest it names (a refused
// link, a backup's import, a shell: requests only, since what a write's
// entry says is the state machine's and cannot change).
func Target(m proto.Message) string {
	if m == nil {
		return ""
	}
	if t := target(m.ProtoReflect(), 2, targetFields); t != "" {
		return t
	}
	return target(m.ProtoReflect(), 2, []protoreflect.Name{"service", "guest"})
}

// targetFields are the fields that name a command's object, best first.
var targetFields = []protoreflect.Name{"name", "domain", "project", "user", "guest_id", "id", "node_id", "host"}

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

// ConfigChange says what a config change does, keys only.
func ConfigChange(set, unset []string) string {
	var parts []string
	if len(set) > 0 {
		parts = append(parts, "set "+strings.Join(set, ", "))
	}
	if len(unset) > 0 {
		parts = append(parts, "unset "+strings.Join(unset, ", "))
	}
	return strings.Join(parts, "; ")
}
