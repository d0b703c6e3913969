package state

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// rejoinNode gives an enrolled node the certificate its rejoin token was
// traded for; the node, its subnet and its guests stay as they are.
func (a *applier) rejoinNode(c *corpusv1.RejoinNode) error {
	tok, _ := a.get(statedb.TableTokens, "id", c.TokenId).(*corpusv1.JoinToken)
	if tok == nil || tok.UsedBy != "" || tok.SecretHash != c.TokenSecretHash || !a.now.AsTime().Before(tok.ExpiresAt.AsTime()) || tok.NodeId != c.NodeId {
		return ErrInvalidToken
	}
	n, err := a.node(c.NodeId)
	if err != nil {
		return err
	}
	if c.Serial == "" {
		return fmt.Errorf("certificate serial is empty: %w", ErrInvalid)
	}
	tok = proto.Clone(tok).(*corpusv1.JoinToken)
	tok.UsedBy = n.Id
	a.put(statedb.TableTokens, tok)
	n.PrevCertSerial, n.CertSerial, n.CertExpiresAt = "", c.Serial, c.ExpiresAt
	n.CertCaPin, n.TrustedCaPins = c.CaPin, c.TrustedCaPins
	n.ModifyIndex = a.index
	a.put(statedb.TableNodes, n)
	return nil
}
