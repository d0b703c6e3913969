// Package admission runs the operators' admission extensions on a write
// before the handler proposes it: mutating ones may change the request,
// validating ones may refuse it, each under its failure policy.
package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/coordinator/extensions"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Controller calls the extensions of the replicated state.
type Controller struct {
	Store *state.Store
	// Extensions calls them (nil: writes an extension is for are
	// refused).
	Extensions *extensions.Caller
	// Keyring opens their secrets.
	Keyring *keyring.Ring
	// Audit records the failures their policy passes over (nil: none
	// are).
	Audit  *audit.Auditor
	Logger *slog.Logger
}

// Admit runs the extensions called for event on obj, a request about to
// be written, and returns what the mutating ones changed in it (obj is
// changed in place). check validates obj as the handler does; it runs
// again after each change, so an extension that makes the request
// invalid is refused as any invalid input. A refusal names the
// extension and its message; a failed call refuses the write when the
// extension's failure policy is fail, and is recorded and passed over
// when it is ignore. Nothing is proposed here: the handler writes after.
func (c *Controller) Admit(ctx context.Context, event string, obj proto.Message, check func() error) ([]*corpusv1.AdmissionChange, error) {
	return c.AdmitImage(ctx, event, obj, nil, check)
}

// AdmitImage is Admit for a write that runs recorded, the image of a
// release deployed again, when obj names no image itself. Each call
// carries the image obj (as it stands at that call) or recorded runs.
func (c *Controller) AdmitImage(ctx context.Context, event string, obj proto.Message, recorded *corpusv1.AdmissionImage, check func() error) ([]*corpusv1.AdmissionChange, error) {
	image := func() json.RawMessage {
		if img := imageOf(obj); img != nil {
			return imageJSON(img)
		}
		return imageJSON(recorded)
	}
	view := c.Store.Read()
	all := view.Extensions()
	mutators := extensions.For(all, corpusv1.ExtensionMutate, event)
	validators := extensions.For(all, corpusv1.ExtensionValidate, event)
	if len(mutators)+len(validators) == 0 {
		return nil, nil
	}
	if c.Extensions == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("extensions are configured but this coordinator cannot call them"))
	}
	user := auth.FromContext(ctx).String()
	var changes []*corpusv1.AdmissionChange
	for _, e := range mutators {
		before, err := protojson.Marshal(obj)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		ans, err := c.Call(ctx, view, e, extensions.Request{Kind: event, User: user, Object: before, Image: image()})
		if err != nil {
			if err := c.Failed(ctx, e, event, err); err != nil {
				return nil, err
			}
			continue
		}
		if !*ans.Allowed {
			return nil, RefusedBy(e, event, ans.Message)
		}
		if len(ans.Object) == 0 || bytes.Equal(bytes.TrimSpace(ans.Object), []byte("null")) {
			continue
		}
		next := obj.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal(ans.Object, next); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("extension %s answered an object that is not a %s request: %v", e.Name, event, err))
		}
		old := proto.Clone(obj)
		proto.Reset(obj)
		proto.Merge(obj, next)
		if err := check(); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("extension %s made the %s invalid: %v", e.Name, event, audit.ErrorText(err)))
		}
		after, _ := protojson.Marshal(obj)
		beforeJSON, _ := protojson.Marshal(old)
		changes = append(changes, diffJSON(e.Name, beforeJSON, after)...)
	}
	if len(validators) == 0 {
		return changes, nil
	}
	final, err := protojson.Marshal(obj)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	finalImage := image()
	type result struct {
		ans *extensions.Answer
		err error
	}
	results := make([]result, len(validators))
	var wg sync.WaitGroup
	for i, e := range validators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ans, err := c.Call(ctx, view, e, extensions.Request{Kind: event, User: user, Object: final, Image: finalImage})
			results[i] = result{ans, err}
		}()
	}
	wg.Wait()
	for i, e := range validators {
		r := results[i]
		if r.err != nil {
			if err := c.Failed(ctx, e, event, r.err); err != nil {
				return nil, err
			}
			continue
		}
		if !*r.ans.Allowed {
			return nil, RefusedBy(e, event, r.ans.Message)
		}
	}
	return changes, nil
}

// Call calls e with its secret opened.
func (c *Controller) Call(ctx context.Context, view *state.Snap, e *corpusv1.Extension, req extensions.Request) (*extensions.Answer, error) {
	var secret []byte
	if len(e.Secret) > 0 {
		k, err := c.Keyring.Open(view)
		if err != nil {
			return nil, &extensions.CallError{Extension: e.Name, Reason: "error", Err: fmt.Errorf("opening its secret: %w", err)}
		}
		opened, err := keyring.OpenSealed(k, map[string][]byte{"secret": e.Secret}, func(string) string { return state.ExtensionPlace(e.Name) })
		if err != nil {
			return nil, &extensions.CallError{Extension: e.Name, Reason: "error", Err: fmt.Errorf("opening its secret: %w", err)}
		}
		secret = []byte(opened["secret"])
	}
	return c.Extensions.Call(ctx, e, secret, req)
}

// RefusedBy is an extension's refusal of a write.
func RefusedBy(e *corpusv1.Extension, event, msg string) error {
	if msg == "" {
		msg = "no reason given"
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s refused by extension %s: %s", event, e.Name, msg))
}

// Failed applies e's failure policy to a failed call: the
// write's error under fail; under ignore, nil once the failure is logged
// and audited.
func (c *Controller) Failed(ctx context.Context, e *corpusv1.Extension, event string, err error) error {
	if e.FailurePolicy == corpusv1.FailurePolicyIgnore {
		c.Logger.Warn("extension failed; its failure policy is ignore, so the write goes on", "extension", e.Name, "event", event, "error", err)
		if c.Audit != nil {
			if aerr := c.Audit.Record(ctx, auth.FromContext(ctx).String(), "extension_failed", e.Name,
				fmt.Sprintf("ignored for %s: %v", event, err)); aerr != nil {
				c.Logger.Warn("recording an ignored extension failure", "error", aerr)
			}
		}
		return nil
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%v; the %s was not made: the extension's failure policy is fail (corpus extension disable %s goes on without it)", err, event, e.Name))
}

// diffJSON lists the values that differ between two JSON objects, by
// path, as changes made by extension.
func diffJSON(extension string, before, after []byte) []*corpusv1.AdmissionChange {
	flat := func(b []byte) map[string]string {
		var v any
		json.Unmarshal(b, &v)
		out := map[string]string{}
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			// An empty object is no value: it reads as its fields
			// absent, so filling it in is not a removal.
			if m, ok := v.(map[string]any); ok {
				for k, x := range m {
					p := k
					if prefix != "" {
						p = prefix + "." + k
					}
					walk(p, x)
				}
				return
			}
			raw, _ := json.Marshal(v)
			out[prefix] = string(raw)
		}
		walk("", v)
		return out
	}
	a, z := flat(before), flat(after)
	var out []*corpusv1.AdmissionChange
	for _, k := range slices.Sorted(maps.Keys(z)) {
		if a[k] != z[k] {
			out = append(out, &corpusv1.AdmissionChange{Extension: extension, Field: k, Value: z[k]})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, ok := z[k]; !ok {
			out = append(out, &corpusv1.AdmissionChange{Extension: extension, Field: k})
		}
	}
	return out
}
