// Package carotation rotates the cluster CA, as Kubernetes' manual CA
// rotation does, in two phases recorded in the replicated state:
//
//	trust: a new CA is made and its key sealed with the keyring into the
//	       state; every replica takes it from there, and every node is
//	       given it, as a second trusted CA. The old CA still signs.
//	sign:  once every voter and node trusts the new CA, the new CA
//	       signs: each replica issues itself a certificate of it, each
//	       node renews its own (told by its watch).
//	done:  once every voter and node holds a certificate of the new CA,
//	       it becomes the only CA trusted and the keyring's keys are
//	       wrapped for its key-encryption key, in one entry.
//
// No component stops talking at any point: while certificates of either
// CA are in use, both are trusted. The leader moves a rotation on (Loop);
// the operator starts, forces or aborts one (Rotator).
package carotation

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	corpusv1 "corpus/proto/corpus/v1"
)

var _ api.CARotations = (*Rotator)(nil)

// Rotator starts, moves on and describes rotations of the cluster CA.
type Rotator struct {
	Store *state.Store
	CA    api.Authority
	// Ring is the cluster keyring (the new CA's key is sealed with it).
	Ring func() *keyring.Ring
	// Voters lists the ids of the group's voters.
	Voters func() ([]string, error)
	// Propose commits a command through Raft.
	Propose func(context.Context, *corpusv1.Command) (uint64, error)
}

// Start starts a rotation to a new CA.
func (r *Rotator) Start(ctx context.Context, actor string) error {
	view := r.Store.Read()
	if rot := view.Config().GetCa().GetRotation(); rot != nil {
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a rotation of the cluster CA is in progress (%s phase, started %s); see `corpus operator ca status`", rot.Phase, rot.StartedAt.AsTime().Format(time.RFC3339)))
	}
	old, err := r.clusterCA(view)
	if err != nil {
		return err
	}
	k, err := r.Ring().Ensure(ctx)
	if err != nil {
		return err
	}
	id := view.Config().GetClusterId()
	certPEM, keyPEM, err := pki.NewCA(fmt.Sprintf("%.8s %s", id, time.Now().UTC().Format("2006-01-02 15:04")))
	if err != nil {
		return fmt.Errorf("making the new CA: %w", err)
	}
	next, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return err
	}
	sealed, err := k.Seal(keyPEM, state.CAKeyPlace(next.Pin()))
	if err != nil {
		return err
	}
	_, err = r.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_StartCaRotation{StartCaRotation: &corpusv1.StartCaRotation{
		OldCertPem: string(old.CertPEM),
		Rotation:   &corpusv1.CaRotation{CertPem: string(certPEM), KeySealed: sealed, Phase: corpusv1.CAPhaseTrust, StartedBy: actor},
	}}})
	return err
}

// clusterCA is the CA the state names the cluster's (a cluster never
// rotated names none: this replica's signer is it), which this replica
// must hold.
func (r *Rotator) clusterCA(view *state.Snap) (*pki.CA, error) {
	pem := view.Config().GetCa().GetCertPem()
	if pem == "" {
		return r.CA.Signer(), nil
	}
	return r.held(pem)
}

// held is the CA of certPEM among those this replica holds.
func (r *Rotator) held(certPEM string) (*pki.CA, error) {
	if ca := pki.FindCA(r.CA.Held(), certPEM); ca != nil {
		return ca, nil
	}
	pin, err := pki.PinOf([]byte(certPEM))
	if err != nil {
		return nil, err
	}
	return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("this coordinator does not hold the key of CA %.16s yet; try again", pin))
}

// waitHeld is held, waiting a little for this replica to take the CA
// from the state (a rotation just started).
func (r *Rotator) waitHeld(ctx context.Context, certPEM string) (*pki.CA, error) {
	for i := 0; ; i++ {
		ca, err := r.held(certPEM)
		if err == nil || i == 50 {
			return ca, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Advance moves the rotation to the CA of pin into its sign phase.
func (r *Rotator) Advance(ctx context.Context, pin string) error {
	_, err := r.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_AdvanceCaRotation{AdvanceCaRotation: &corpusv1.AdvanceCaRotation{Pin: pin}}})
	return err
}

// Abort ends the rotation in progress, in its trust phase.
func (r *Rotator) Abort(ctx context.Context) error {
	rot := r.Store.Read().Config().GetCa().GetRotation()
	if rot == nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("no rotation of the cluster CA is in progress"))
	}
	pin, err := pki.PinOf([]byte(rot.CertPem))
	if err != nil {
		return err
	}
	_, err = r.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_AbortCaRotation{AbortCaRotation: &corpusv1.AbortCaRotation{Pin: pin}}})
	return err
}

// Finish makes the new CA of the rotation in its sign phase the only
// one, the keyring wrapped for it.
func (r *Rotator) Finish(ctx context.Context) error {
	view := r.Store.Read()
	ca := view.Config().GetCa()
	rot := ca.GetRotation()
	if rot == nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("no rotation of the cluster CA is in progress"))
	}
	from, err := r.waitHeld(ctx, ca.CertPem)
	if err != nil {
		return err
	}
	to, err := r.waitHeld(ctx, rot.CertPem)
	if err != nil {
		return err
	}
	cmd := &corpusv1.FinishCaRotation{Pin: to.Pin()}
	if kr := view.Keyring(); kr != nil {
		kr = proto.Clone(kr).(*corpusv1.Keyring)
		if err := keyring.Rewrap(kr, from, to); err != nil {
			return err
		}
		cmd.Keyring = kr
	}
	_, err = r.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_FinishCaRotation{FinishCaRotation: cmd}})
	return err
}

// Force moves the rotation in progress to its end now: into its sign
// phase if it is not there yet, then finished. Components that do not
// hold a certificate of the new CA are left out.
func (r *Rotator) Force(ctx context.Context) error {
	rot := r.Store.Read().Config().GetCa().GetRotation()
	if rot == nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("no rotation of the cluster CA is in progress"))
	}
	if rot.Phase == corpusv1.CAPhaseTrust {
		pin, err := pki.PinOf([]byte(rot.CertPem))
		if err != nil {
			return err
		}
		if err := r.Advance(ctx, pin); err != nil {
			return err
		}
	}
	return r.Finish(ctx)
}

// Status describes the cluster CA and the rotation in progress.
func (r *Rotator) Status() (*corpusv1.CaStatus, error) {
	view := r.Store.Read()
	cur, err := r.clusterCA(view)
	if err != nil {
		return nil, err
	}
	trusted, _, ok := view.Config().GetCa().Trusted()
	if !ok {
		trusted = []string{string(cur.CertPEM)}
	}
	st := &corpusv1.CaStatus{Current: info(cur.Cert), TrustedPem: strings.Join(trusted, "")}
	rot := view.Config().GetCa().GetRotation()
	var next string
	if rot != nil {
		c, err := pki.ParseCert([]byte(rot.CertPem))
		if err != nil {
			return nil, err
		}
		next = pki.Pin(c)
		st.Next, st.Phase, st.StartedAt, st.StartedBy = info(c), rot.Phase, rot.StartedAt, rot.StartedBy
	}
	voters, err := r.Voters()
	if err != nil {
		return nil, err
	}
	for _, id := range voters {
		h := &corpusv1.CaHolder{Id: id, Name: id}
		if co := view.Coordinator(id); co != nil {
			h.CaPin, h.Moved, h.Trusts = co.CaPin, next != "" && co.CaPin == next, next != "" && slices.Contains(co.TrustedCaPins, next)
		}
		st.Replicas = append(st.Replicas, h)
	}
	for _, n := range view.Nodes() {
		st.Nodes = append(st.Nodes, &corpusv1.CaHolder{Id: n.Id, Name: n.Name, CaPin: n.CertCaPin, Status: n.Status,
			Moved: next != "" && n.CertCaPin == next, Trusts: next != "" && slices.Contains(n.TrustedCaPins, next)})
	}
	return st, nil
}

func info(c *x509.Certificate) *corpusv1.CaInfo {
	return &corpusv1.CaInfo{Pin: pki.Pin(c), Subject: c.Subject.CommonName, NotBefore: timestamppb.New(c.NotBefore), NotAfter: timestamppb.New(c.NotAfter)}
}

// Loop moves rotations on while this replica leads: to the sign phase
// once every voter and node trusts the new CA, to the end once each
// holds a certificate of it.
type Loop struct {
	Rotator *Rotator
	// TrustPeriod is the least a rotation stays in its trust phase.
	TrustPeriod time.Duration
	Logger      *slog.Logger
}

// DefaultTrustPeriod is Loop.TrustPeriod's default.
const DefaultTrustPeriod = 10 * time.Second

// recheck is how often the loop looks again without a state change (the
// group's voters change outside the replicated state).
const recheck = 2 * time.Second

// Run moves rotations on until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	logger := l.Logger.With("component", "ca_rotation")
	var said string
	for ctx.Err() == nil {
		v := l.Rotator.Store.Read()
		v.WatchIndex()
		if v.Config().GetCa().GetRotation() != nil {
			if st, err := l.Rotator.Status(); err != nil {
				logger.Debug("reading the rotation's progress", "error", err)
			} else if step, left := nextStep(st, l.TrustPeriod); step != "" {
				var err error
				switch step {
				case corpusv1.CAPhaseSign:
					err = l.Rotator.Advance(ctx, st.Next.Pin)
				default:
					err = l.Rotator.Finish(ctx)
				}
				if err != nil {
					logger.Warn("moving the CA rotation on", "to", step, "error", err)
				} else {
					logger.Info("moved the CA rotation on", "to", step, "ca", st.Next.Pin[:16])
					continue
				}
			} else if left != said {
				logger.Info("the CA rotation waits", "phase", st.Phase, "for", left)
				said = left
			}
		}
		wctx, cancel := context.WithTimeout(ctx, recheck)
		_ = v.Wait(wctx)
		cancel()
	}
}

// nextStep is where a rotation may move ("sign", "done"), or "" and who
// (or what) it waits for.
func nextStep(st *corpusv1.CaStatus, trustPeriod time.Duration) (step, waiting string) {
	var left []string
	sign := st.Phase == corpusv1.CAPhaseSign
	for _, h := range st.Replicas {
		if (!sign && !h.Trusts) || (sign && !h.Moved) {
			left = append(left, "replica "+h.Name)
		}
	}
	for _, h := range st.Nodes {
		if (!sign && !h.Trusts) || (sign && !h.Moved) {
			left = append(left, "node "+h.Name)
		}
	}
	switch {
	case len(left) > 0:
		return "", strings.Join(left, ", ")
	case !sign && time.Since(st.StartedAt.AsTime()) < trustPeriod:
		return "", fmt.Sprintf("the trust period (%s) to pass", trustPeriod)
	case sign:
		return "done", ""
	default:
		return corpusv1.CAPhaseSign, ""
	}
}
