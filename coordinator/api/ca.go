package api

import (
	"context"
	"errors"
	"strings"

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
