package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/pki"
	corpusv1 "corpus/proto/corpus/v1"
)

// Authority is the cluster CA as this replica holds it, which a rotation
// of the cluster CA changes while it runs.
type Authority interface {
	// Signer is the CA that issues certificates now.
	Signer() *pki.CA
	// Held are the CAs whose keys the replica holds, the signer first.
	Held() []*pki.CA
	// Took says whether the replica has taken the CAs rec names: it
	// signs with rec's signer, presents a certificate of it, and
	// trusts rec's CAs alone.
	Took(rec *corpusv1.ClusterCa) bool
}

// CARotations starts, ends and describes rotations of the cluster CA
// (coordinator/carotation; its leader loop moves them on).
type CARotations interface {
	Start(ctx context.Context, actor string) error
	// Force ends the rotation in progress now; Abort cancels it.
	Force(ctx context.Context) error
	Abort(ctx context.Context) error
	Status() (*corpusv1.CaStatus, error)
}

// caTakeWait is how long WaitCA waits for this replica to take a change
// of the cluster CAs: a moment, unless it cannot.
const caTakeWait = 10 * time.Second

// WaitCA waits until this replica has taken the cluster CAs the state
// names now (it takes them a moment after the write that changed them):
// a client that trusts what it then says of them reaches it. It is an
// Unavailable error when the replica has not taken them in time.
func (b *Backend) WaitCA(ctx context.Context) error {
	deadline := time.Now().Add(caTakeWait)
	for !b.CA.Took(b.Store.Read().Config().GetCa()) {
		if time.Now().After(deadline) {
			return connect.NewError(connect.CodeUnavailable, errors.New("this coordinator has not taken the cluster CA's change yet; see `corpus operator ca status`"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// NodeTrust is what nodes are given as of view: the CAs trusted, PEM,
// and the pin of the one that signs. It is an Unavailable error while
// this replica's signer is another (it has not taken the state's change
// yet): a node would get a certificate of the CA it is told to move from.
func (b *Backend) NodeTrust(view *state.Snap) (*corpusv1.ClusterTrust, error) {
	signer := b.CA.Signer()
	trusted, signerPEM, ok := view.Config().GetCa().Trusted()
	if !ok {
		return &corpusv1.ClusterTrust{CaPem: signer.CertPEM, SignerPin: signer.Pin()}, nil
	}
	pin, err := pki.PinOf([]byte(signerPEM))
	if err != nil {
		return nil, err
	}
	if pin != signer.Pin() {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("this coordinator has not taken the cluster CA's change yet; try again"))
	}
	return &corpusv1.ClusterTrust{CaPem: []byte(strings.Join(trusted, "")), SignerPin: pin}, nil
}
