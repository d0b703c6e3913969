// Package audit records in the replicated audit log what never reaches
// the state machine as a write: calls the API refused and acts that
// change a guest without a write.
package audit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"log/slog"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/auth"
	"corpus/coordinator/state/auditentry"
	corpusv1 "corpus/proto/corpus/v1"
)

// The audit log records every write applied (package state), and from
// here what never reaches the state machine as a write: calls the API
// refused (a policy, a validation, a permission check in a handler) and
// acts that change a guest without a write (an exec, recorded before it
// runs). Refusals are rate-limited per caller, so a caller hammering
// the API cannot flood the replicated log; what the limit drops is
// counted in the log's next entry for that caller.

const (
	refusalRate  = 2 // audit entries per second and caller, sustained
	refusalBurst = 20
	auditTimeout = 5 * time.Second
)

// Proposer commits a command through Raft.
type Proposer interface {
	Propose(ctx context.Context, cmd *corpusv1.Command) (uint64, error)
}

// Auditor writes audit entries of calls.
type Auditor struct {
	p       Proposer
	logger  *slog.Logger
	mu      sync.Mutex
	limits  map[string]*rate.Limiter
	dropped map[string]int
}

// New returns an auditor that writes through p and logs what it cannot
// write to logger (nil: nowhere).
func New(p Proposer, logger *slog.Logger) *Auditor {
	return &Auditor{p: p, logger: logger, limits: map[string]*rate.Limiter{}, dropped: map[string]int{}}
}

// Record writes one entry as actor; it returns the write's error.
func (a *Auditor) Record(ctx context.Context, actor, action, target, result string) error {
	cmd := &corpusv1.Command{Ignorable: true, Actor: actor, Cmd: &corpusv1.Command_RecordAudit{RecordAudit: &corpusv1.RecordAudit{
		Action: action, Target: target, Result: result,
	}}}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	_, err := a.p.Propose(ctx, cmd)
	return err
}

// Refused records a refused call, within the caller's rate.
func (a *Auditor) Refused(ctx context.Context, p auth.Principal, procedure string, req proto.Message, err error) {
	a.Refusal(ctx, p.String(), "refused "+shortProcedure(procedure), auditentry.Target(req), ErrorText(err))
}

// Refusal records that actor was refused action on target, and why,
// within the actor's rate: what the rate leaves out is counted in the
// actor's next entry.
func (a *Auditor) Refusal(ctx context.Context, actor, action, target, why string) {
	if a == nil {
		return // a backend not mounted records nothing
	}
	a.mu.Lock()
	l := a.limits[actor]
	if l == nil {
		if len(a.limits) > 10000 { // forget idle callers now and then
			a.limits = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(refusalRate, refusalBurst)
		a.limits[actor] = l
	}
	if !l.Allow() {
		a.dropped[actor]++
		a.mu.Unlock()
		return
	}
	dropped := a.dropped[actor]
	delete(a.dropped, actor)
	a.mu.Unlock()

	result := "refused: " + why
	if dropped > 0 {
		result += " (and " + strconv.Itoa(dropped) + " earlier refusals of this caller over the audit rate)"
	}
	if werr := a.Record(ctx, actor, action, target, result); werr != nil && a.logger != nil {
		a.logger.Warn("recording a refusal in the audit log", "actor", actor, "action", action, "error", werr)
	}
}

// audited reports whether a handler error is a refusal the audit log
// keeps: permission and validation. Writes the state machine refused are
// in the log already (see auditedWrite).
func audited(ctx context.Context, err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodePermissionDenied, connect.CodeInvalidArgument:
		return !wroteAudit(ctx)
	}
	return false
}

type wroteKey struct{}

// withWriteMark gives a call a mark that write sets once a command of
// the call was applied, and so audited by the state machine.
func withWriteMark(ctx context.Context) context.Context {
	return context.WithValue(ctx, wroteKey{}, new(bool))
}

// MarkWrote says a command of the call was applied (refused or not):
// the state machine audited it, so a refusal is not audited again.
func MarkWrote(ctx context.Context) {
	if p, ok := ctx.Value(wroteKey{}).(*bool); ok {
		*p = true
	}
}

func wroteAudit(ctx context.Context) bool {
	p, ok := ctx.Value(wroteKey{}).(*bool)
	return ok && *p
}

// Interceptor records refusals of handlers (inside the auth interceptor,
// so the caller is known).
func (a *Auditor) Interceptor() connect.Interceptor { return auditInterceptor{a} }

type auditInterceptor struct{ a *Auditor }

func (i auditInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx = withWriteMark(ctx)
		res, err := next(ctx, req)
		if err != nil && audited(ctx, err) {
			m, _ := req.Any().(proto.Message)
			i.a.Refused(ctx, auth.FromContext(ctx), req.Spec().Procedure, m, err)
		}
		return res, err
	}
}

func (i auditInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i auditInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx = withWriteMark(ctx)
		rc := &recvConn{StreamingHandlerConn: conn}
		err := next(ctx, rc)
		if err != nil && audited(ctx, err) {
			i.a.Refused(ctx, auth.FromContext(ctx), conn.Spec().Procedure, rc.first, err)
		}
		return err
	}
}

// recvConn keeps the first message a stream received: its request.
type recvConn struct {
	connect.StreamingHandlerConn
	first proto.Message
}

func (c *recvConn) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	if err == nil && c.first == nil {
		c.first, _ = m.(proto.Message)
	}
	return err
}

// shortProcedure turns "/corpus.v1.GuestService/CreateGuest" into
// "GuestService.CreateGuest".
func shortProcedure(p string) string {
	p = strings.TrimPrefix(p, "/corpus.v1.")
	return strings.Replace(p, "/", ".", 1)
}

// ErrorText is an error's message without connect's code prefix.
func ErrorText(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}
